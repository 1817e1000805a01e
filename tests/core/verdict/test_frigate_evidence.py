"""Frigate's own evidence reaches the floor (issue 40): real payloads through the real mapping, the contract's
validator, the context and the floor; and hsi's own write-back read back through the same path."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from hsi_dagster.core.context.camera_profiles import CameraProfile, parse_camera_profiles
from hsi_dagster.core.context.enrichment import build_context
from hsi_dagster.core.frigate.mapping import Emit, Skip, map_event, to_detection
from hsi_dagster.core.intake.detections import Detection
from hsi_dagster.core.outbound.frigate_writeback import sub_label_for
from hsi_dagster.core.prompt.messages import build_sections, render_block
from hsi_dagster.core.verdict.evidence import EvidenceRules, evidence_floor
from hsi_dagster.core.verdict.evidence_alerts import evidence_alerts

RES = {"front_door": (1280, 720), "driveway": (1920, 1080)}
NIGHT = datetime(2026, 12, 8, 2, 30, tzinfo=UTC).timestamp()  # 02:30 in Europe/London (GMT in December)
DAY = datetime(2026, 12, 8, 14, 30, tzinfo=UTC).timestamp()
PROFILES = parse_camera_profiles(
    """
cameras:
  front_door:
    timezone: Europe/London
    zones: [walkway, front_door, street]
    entry_zones: [front_door]
  driveway:
    timezone: Europe/London
    zones: [driveway, street]
    private_zones: [driveway]
    resident_vehicles: [{description: blue estate, plate: KX73 ABC}]
""",
    source="test",
)


def person(at: float = NIGHT, **changes: Any) -> dict[str, Any]:
    after = {
        "id": f"{at:.6f}-p1",
        "camera": "front_door",
        "frame_time": at,
        "label": "person",
        "sub_label": None,
        "top_score": 0.84,
        "false_positive": False,
        "start_time": at,
        "end_time": None,
        "score": 0.82,
        "box": [600, 200, 760, 700],
        "current_zones": ["front_door"],
        "entered_zones": ["front_door"],
        "stationary": False,
        "attributes": {},
        "current_attributes": [],
        "motionless_count": 0,
        "recognized_license_plate": None,
    }
    after.update(changes)
    return after


def new(after: dict[str, Any]) -> dict[str, Any]:
    before = copy.deepcopy(after)
    before["false_positive"] = True
    return {"type": "new", "before": before, "after": after}


def update(before: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {"type": "update", "before": copy.deepcopy(before), "after": {**copy.deepcopy(before), **changes}}


def detections(*payloads: dict[str, Any]) -> list[dict[str, Any]]:
    """The payloads as the pipeline stores them: mapped, then checked by the contract's validator."""
    out = []
    for number, payload in enumerate(payloads, start=1):
        outcome = map_event(payload, RES)
        if isinstance(outcome, Skip):
            continue
        assert isinstance(outcome, Emit), outcome
        checked = to_detection(outcome, "{}", source="test", line_no=number)
        assert isinstance(checked, tuple), checked
        detection = checked[1]
        assert isinstance(detection, Detection)
        out.append(detection.to_record())
    return out


def floor_of(records: list[dict[str, Any]], quality: str = "full", rules: EvidenceRules | None = None) -> Any:
    camera = records[0]["camera_id"]
    profile: CameraProfile = PROFILES[camera]
    times = sorted(r["ts"] for r in records)
    batch = {
        "batch_id": "b1",
        "camera_id": camera,
        "started_at": times[0],
        "last_ts": times[-1],
        "close_reason": "idle",
    }
    context = build_context(batch, records, quality_level=quality, clip_noise_threshold=0.2, camera_profile=profile)
    return evidence_floor(context, profile, None, rules)


# ------------------------------------------------------------------------------------------------ the table
def test_a_stranger_at_the_front_door_at_0230_is_high() -> None:
    floor = floor_of(detections(new(person())))
    assert floor.level == "high", floor.reasons
    assert "person at night" in floor.reasons[0] and "'front_door'" in floor.reasons[0]


def test_overlapping_zones_each_count_a_stranger_on_walkway_and_front_door_is_high() -> None:
    records = detections(new(person(current_zones=["walkway", "front_door"], entered_zones=["walkway", "front_door"])))
    assert records[0]["zone"] == "walkway,front_door"  # the contract's one zone text, for display
    floor = floor_of(records)
    assert floor.level == "high", floor.reasons
    assert "entry zone 'front_door'" in floor.reasons[0]


def test_a_zone_entered_earlier_in_the_track_counts_for_the_track() -> None:
    records = detections(new(person(current_zones=["walkway"], entered_zones=["walkway", "front_door"])))
    assert floor_of(records).level == "high"


def test_a_recognised_face_is_known_at_every_quality_level() -> None:
    records = detections(new(person(sub_label=["alice", 0.93])))
    for quality in ("full", "standard", "minimal"):
        floor = floor_of(copy.deepcopy(records), quality)
        assert floor.score == 0, (quality, floor.reasons)


def test_hsis_own_write_back_read_back_is_never_an_identity() -> None:
    """The loop: the intruder's event is judged high, hsi writes its sub label, Frigate's next update carries it as
    [name, null]; the intruder still at the door must stay a stranger."""
    first = person()
    written = sub_label_for("high", {"sub_label": first["sub_label"]})
    assert written == "risk high"
    later = update(first, frame_time=NIGHT + 20, sub_label=[written, None], box=[400, 200, 560, 700])
    records = detections(new(first), later)
    assert len(records) == 2 and "reid" not in (records[1]["enrichment"] or {})
    assert records[1]["enrichment"]["frigate"]["sub_label"] == {"name": "risk high", "kind": "hsi"}
    floor = floor_of(records)
    assert floor.level == "high", floor.reasons
    # even with a score (a Frigate version that kept one), hsi's own text is no identity
    scored = update(first, frame_time=NIGHT + 20, sub_label=["risk critical", 0.99], box=[400, 200, 560, 700])
    assert floor_of(detections(new(first), scored)).level == "high"


@pytest.mark.parametrize(
    ("sub_label", "kind"),
    [(["Mr Smith", None], "manual"), (["ups", 0.81], "logo"), ("alice", "manual")],
)
def test_a_sub_label_no_recogniser_scored_is_no_identity(sub_label: Any, kind: str) -> None:
    records = detections(new(person(sub_label=sub_label)))
    assert records[0]["enrichment"]["frigate"]["sub_label"]["kind"] == kind
    assert floor_of(records).level == "high"


def test_a_courier_at_the_door_is_a_delivery_context_not_an_exemption_at_night() -> None:
    courier = person(attributes={"ups": 0.88, "face": 0.7}, current_attributes=[{"label": "ups", "score": 0.88}])
    records = detections(new(courier))
    enrichment = records[0]["enrichment"]
    assert enrichment["frigate"]["attributes"] == {"face": 0.7, "ups": 0.88}
    assert enrichment["frigate"]["delivery"] == "ups" and "reid" not in enrichment
    floor = floor_of(records)
    assert floor.level == "high" and "courier logo 'ups'" in floor.reasons[0]
    by_day = detections(new(person(at=DAY, attributes={"ups": 0.88})))
    assert floor_of(by_day).score == 0  # a courier at the door by day: nothing for the floor


def car(at: float = NIGHT, **changes: Any) -> dict[str, Any]:
    return person(
        at,
        id=f"{at:.6f}-c1",
        camera="driveway",
        label="car",
        box=[700, 540, 1180, 880],
        current_zones=["driveway"],
        entered_zones=["street", "driveway"],
        **changes,
    )


def test_a_known_plate_is_the_household_and_an_unknown_plate_at_night_is_evidence() -> None:
    unknown = floor_of(detections(new(car(recognized_license_plate=["AB12 CDE", 0.9]))))
    assert unknown.level == "medium" and "plate 'AB12 CDE' not a known plate" in unknown.reasons[0]
    resident = floor_of(detections(new(car(recognized_license_plate=["kx73-abc", 0.9]))))  # the profile's
    assert resident.score == 0, resident.reasons
    listed = EvidenceRules(known_plates=("AB12CDE",))  # KNOWN_PLATES
    assert floor_of(detections(new(car(recognized_license_plate=["AB12 CDE", 0.9]))), rules=listed).score == 0
    named = floor_of(detections(new(car(sub_label=["Dad's car", 0.95]))))  # Frigate's own lpr.known_plates
    assert named.score == 0


def test_an_invalid_known_plate_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match="'A!'"):
        EvidenceRules(known_plates=("KX73ABC", "A!"))


# ------------------------------------------------------------------------------------------------ dwell
def test_a_stationary_persons_time_counts_for_loitering_though_its_updates_are_unchanged() -> None:
    """02:30, a person stands at the door: `new`, then the once-a-minute updates with nothing changed. Each update is
    kept (change `dwell`) and carries Frigate's start_time, so even a batch holding only the later updates sees
    the person has been there over the loitering time."""
    first = person(stationary=True, motionless_count=40)
    minute = update(first, frame_time=NIGHT + 61, motionless_count=340)
    two = update(minute["after"], frame_time=NIGHT + 122, motionless_count=640)
    outcome = map_event(minute, RES)
    assert isinstance(outcome, Emit) and outcome.changes == ("dwell",)
    later_batch = detections(minute, two)  # a batch of its own after the idle timeout
    floor = floor_of(later_batch)
    reasons = " | ".join(floor.reasons)
    assert "loitering in the dark" in reasons and "stays 122 s" in reasons
    frigate = later_batch[-1]["enrichment"]["frigate"]
    assert frigate["tracked_s"] == 122.0 and frigate["motionless_count"] == 640


def test_a_parked_cars_unchanged_update_is_still_skipped() -> None:
    parked = car(stationary=True)
    assert isinstance(map_event(update(parked, frame_time=NIGHT + 61), RES), Skip)


# ------------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"sub_label": [3, 0.5]}, "after.sub_label[0]"),
        ({"sub_label": {"name": "alice"}}, "after.sub_label:"),
        ({"sub_label": ["alice", "high"]}, "after.sub_label[1]"),
        ({"attributes": "face"}, "after.attributes:"),
        ({"attributes": {"face": 7}}, "after.attributes.face"),
        ({"current_attributes": [{"label": None}]}, "after.current_attributes[0]"),
        ({"current_attributes": "ups"}, "after.current_attributes:"),
        ({"recognized_license_plate": [1, 2, 3]}, "after.recognized_license_plate:"),
        ({"motionless_count": "many"}, "after.motionless_count"),
        ({"start_time": "dawn"}, "after.start_time"),
    ],
)
def test_an_unknown_shape_is_ignored_with_a_reason_on_the_detection(changes: dict[str, Any], reason: str) -> None:
    records = detections(new(person(**changes)))
    ignored = records[0]["enrichment"]["frigate"]["ignored"]
    assert any(line.startswith(reason) for line in ignored), ignored
    assert "reid" not in records[0]["enrichment"]
    assert floor_of(records).level == "high"  # the stranger is still judged


# ------------------------------------------------------------------------------------------------ alerts before the LLM
def test_the_evidence_only_alert_reads_every_zone_and_no_write_back_identity() -> None:
    first = person(current_zones=["walkway", "front_door"], entered_zones=["walkway", "front_door"])
    written = update(first, frame_time=NIGHT + 20, sub_label=["risk high", None], box=[400, 200, 560, 700])
    rows = []
    for record in detections(new(first), written):  # as storage.evidence_alerts reads them: ts as datetimes
        rows.append({**record, "ts": datetime.fromisoformat(record["ts"].replace("Z", "+00:00"))})
    alerts = evidence_alerts(rows, [r["detection_id"] for r in rows], PROFILES, cooldown_seconds=600.0)
    assert [(a.camera_id, a.risk_level) for a in alerts] == [("front_door", "high")]
    assert "entry zone 'front_door'" in alerts[0].reasons[0]


def test_the_prompt_shows_every_zone_and_the_attributes_as_facts_not_identities() -> None:
    courier = person(
        at=DAY,
        current_zones=["walkway", "front_door"],
        entered_zones=["street", "walkway", "front_door"],
        attributes={"ups": 0.88},
        sub_label=["risk high", None],
    )
    records = detections(new(courier))
    batch = {"batch_id": "b1", "camera_id": "front_door", "started_at": records[0]["ts"], "close_reason": "idle"}
    context = build_context(batch, records, quality_level="minimal", clip_noise_threshold=0.2)
    text = "".join(render_block(section) for section in build_sections(context))
    assert 'zone "walkway", "front_door"' in text
    assert 'entered earlier "street"' in text and 'attributes "ups" 0.88' in text
    assert 'courier logo "ups" (a uniform or van: not an identity)' in text
    assert 'sub label (not an identity) "risk high (hsi)"' in text
