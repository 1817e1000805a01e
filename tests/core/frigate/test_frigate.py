"""core/frigate/: Frigate payloads -> contract records, the state policy, identities, captions, the API cursor."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from hsi_dagster.core.frigate.api_cursor import ApiCursor, plan_api_pull
from hsi_dagster.core.frigate.config import FrigateConfigError, detect_resolutions
from hsi_dagster.core.frigate.mapping import (
    SKIP_FALSE_POSITIVE,
    SKIP_NOT_A_DETECTION,
    SKIP_UNCHANGED,
    Emit,
    Invalid,
    Skip,
    Track,
    TrackDetection,
    map_api_event,
    map_description,
    map_event,
    payload_kind,
    split_topic,
    to_detection,
    track_from_event,
)
from hsi_dagster.core.intake.detections import MAX_TEXT_CHARS, Detection, Rejection

RES = {"driveway": (1920, 1080), "front_door": (1280, 720)}


def state(**changes: Any) -> dict[str, Any]:
    base = {
        "id": "1796159100.000000-w1un94",
        "camera": "driveway",
        "frame_time": 1796159104.0,
        "label": "car",
        "sub_label": None,
        "top_score": 0.88,
        "false_positive": False,
        "start_time": 1796159100.0,
        "end_time": None,
        "score": 0.86,
        "box": [700, 540, 1180, 880],
        "current_zones": ["driveway"],
        "entered_zones": ["street", "driveway"],
        "stationary": True,
        "path_data": [[[0.2, 0.7], 1796159100.5], [[0.49, 0.81], 1796159104.0]],
        "recognized_license_plate": None,
    }
    base.update(changes)
    return base


def message(kind: str = "update", before: dict | None = None, **after: Any) -> dict[str, Any]:
    b = state() if before is None else before
    return {"type": kind, "before": b, "after": {**copy.deepcopy(b), **after}}


def emitted(outcome: Any) -> Emit:
    assert isinstance(outcome, Emit), outcome
    return outcome


# ------------------------------------------------------------------------------------------------ state policy
def test_new_is_a_detection_with_pixels_normalised_by_the_detect_resolution() -> None:
    out = emitted(map_event(message("new", frame_time=1796159104.25), RES))
    record = out.record
    assert out.changes == ("new",)
    assert record["detection_id"] == "frigate:1796159100.000000-w1un94:new:1796159104.250000"
    assert record["track_id"] == "1796159100.000000-w1un94"
    assert record["ts"] == "2026-12-01T21:05:04.250000Z"
    assert record["bbox"] == [round(700 / 1920, 6), 0.5, round(1180 / 1920, 6), round(880 / 1080, 6)]
    assert record["zone"] == "driveway" and record["confidence"] == 0.86


def test_an_update_whose_before_is_still_a_false_positive_counts_as_new() -> None:
    payload = message("update", before=state(false_positive=True), false_positive=False)
    assert emitted(map_event(payload, RES)).changes == ("new",)
    assert emitted(map_event({"type": "update", "before": None, "after": state()}, RES)).changes == ("new",)


def test_the_parked_cars_periodic_update_is_skipped_however_often_it_comes() -> None:
    parked = state(frame_time=1796159200.0)
    for minute in range(1, 30):
        later = message(before=parked, frame_time=1796159200.0 + 60 * minute, score=0.85, top_score=0.9,
                        box=[701, 539, 1181, 880], motionless_count=300 * minute)  # fmt: skip
        assert map_event(later, RES) == Skip(SKIP_UNCHANGED)


@pytest.mark.parametrize(
    ("after", "change"),
    [
        ({"current_zones": ["street"]}, "zones"),
        ({"current_zones": []}, "zones"),
        ({"stationary": False}, "stationary"),
        ({"label": "truck"}, "label"),
        ({"sub_label": ["bob", 0.8]}, "sub_label"),
        ({"recognized_license_plate": ["KX73 ABC", 0.91]}, "plate"),
        ({"recognized_license_plate": "KX73 ABC"}, "plate"),
    ],
)
def test_each_change_of_the_policy_makes_a_detection(after: dict, change: str) -> None:
    assert change in emitted(map_event(message(**after), RES)).changes


def test_a_new_score_for_the_same_name_is_not_a_change() -> None:
    before = state(sub_label=["alice", 0.81], stationary=False)
    assert map_event(message(before=before, sub_label=["alice", 0.95]), RES) == Skip(SKIP_UNCHANGED)


def test_a_moving_object_is_a_detection_when_it_moved_by_frigates_path_or_half_its_box() -> None:
    moving = state(stationary=False)
    path = moving["path_data"] + [[[0.6, 0.81], 1796159106.0]]
    assert emitted(map_event(message(before=moving, path_data=path), RES)).changes == ("moved",)
    # Frigate 0.14 shares the path list between before and after: the box decides
    assert emitted(map_event(message(before=moving, box=[960, 540, 1440, 880]), RES)).changes == ("moved",)
    assert map_event(message(before=moving, box=[800, 540, 1280, 880]), RES) == Skip(SKIP_UNCHANGED)
    # a stationary object's jitter is never a move
    assert map_event(message(box=[960, 540, 1440, 880]), RES) == Skip(SKIP_UNCHANGED)


def test_an_end_is_a_detection_only_when_something_changed() -> None:
    assert map_event(message("end", end_time=1796159300.0), RES) == Skip(SKIP_UNCHANGED)
    assert "zones" in emitted(map_event(message("end", end_time=1796159300.0, current_zones=[]), RES)).changes


def test_false_positives_are_skipped() -> None:
    assert map_event(message("new", false_positive=True), RES) == Skip(SKIP_FALSE_POSITIVE)
    assert map_api_event({"id": "x", "false_positive": True}) == Skip(SKIP_FALSE_POSITIVE)


def test_a_redelivered_payload_maps_to_the_same_record() -> None:
    payload = message(current_zones=["street"], frame_time=1796159111.123456)
    assert emitted(map_event(payload, RES)).record == emitted(map_event(copy.deepcopy(payload), RES)).record


# ------------------------------------------------------------------------------------------------ identities
def test_a_recognised_face_is_reid_and_a_plate_is_vehicle_and_reid() -> None:
    person = state(label="person", camera="front_door", box=[100, 100, 200, 400], sub_label=["alice", 0.93])
    record = emitted(map_event(message("new", before=person), RES)).record
    assert record["enrichment"]["reid"] == {"identity": "alice", "known": True, "score": 0.93}
    car = emitted(map_event(message("new", recognized_license_plate=["KX73 ABC", 0.91]), RES)).record
    assert car["enrichment"]["vehicle"] == {"plate": "KX73 ABC"}
    assert "reid" not in car["enrichment"]  # a plate read is not an identity: known plates decide (the floor)
    assert car["enrichment"]["frigate"]["plate"] == {"text": "KX73 ABC", "score": 0.91}
    known = emitted(map_event(message("new", recognized_license_plate="KX73 ABC", sub_label=["Dad's car", 0.9]), RES))
    assert known.record["enrichment"]["reid"]["identity"] == "Dad's car" and known.record["enrichment"]["reid"]["known"]


def test_a_delivery_logo_is_a_uniform_or_van_not_an_identity() -> None:
    person = state(label="person", camera="front_door", box=[100, 100, 200, 400], sub_label=["ups", 0.8])
    enrichment = emitted(map_event(message("new", before=person), RES)).record["enrichment"]
    assert "reid" not in enrichment and "ups" in enrichment["clothing"]["description"]
    van = emitted(map_event(message("new", sub_label=["fedex", 0.7]), RES)).record["enrichment"]
    assert van["vehicle"]["type"] == "delivery vehicle (fedex)"


# ------------------------------------------------------------------------------------------------ bad payloads
@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"type": "moved", "after": state()}, "type"),
        ({"type": "new", "after": "nope"}, "after"),
        (message("new", camera=None), "after.camera"),
        (message("new", camera="attic"), "after.camera"),
        (message("new", box=[700, 540, 1980, 880]), "after.box"),
        (message("new", box=[700, 540, 600, 880]), "after.box"),
        (message("new", box="700,540"), "after.box"),
        (message("new", frame_time="yesterday"), "after.frame_time"),
        (message("new", frame_time=-5.0), "after.frame_time"),
        (message("new", score=1.5), "after.score"),
        (message("new", score=None, top_score=None), "after.score"),
        (message("new", current_zones="driveway"), "after.current_zones"),
        (message("new", id="x" * 65), "after.id"),
    ],
)
def test_a_malformed_payload_is_invalid_with_a_reason_naming_the_field(payload: dict, field: str) -> None:
    outcome = map_event(payload, RES)
    assert isinstance(outcome, Invalid), outcome
    assert outcome.reason.split(":", 1)[0] == field, outcome.reason


def test_the_contract_validator_has_the_last_word_and_its_reason_names_the_frigate_field() -> None:
    out = emitted(map_event(message("new", camera="drive way"), {**RES, "drive way": (1920, 1080)}))
    result = to_detection(out, b'{"raw": "payload"}', source="s", line_no=7)
    assert isinstance(result, Rejection)
    assert result.reason.startswith("after.camera -> camera_id:") and result.line_no == 7
    assert result.raw == '{"raw": "payload"}'  # the original payload is kept, not the mapped record
    good = to_detection(emitted(map_event(message("new"), RES)), b"{}", source="s", line_no=1)
    assert isinstance(good, tuple) and isinstance(good[1], Detection)


# ------------------------------------------------------------------------------------------------ descriptions
TRACK = Track("1796159100.000000-w1un94", "driveway", "car", 0.88, 1796159300.0)


def test_a_description_is_a_caption_on_a_detection_of_its_track() -> None:
    payload = {"type": "description", "id": TRACK.track_id, "description": "A red car parks.", "camera": "driveway"}
    record = emitted(map_description(payload, TRACK)).record
    assert record["detection_id"].startswith(f"frigate:{TRACK.track_id}:description:")
    assert record["ts"] == "2026-12-01T21:08:20.000000Z" and record["label"] == "car" and record["confidence"] == 0.88
    assert record["enrichment"]["florence"] == {"caption": "A red car parks."}
    other = emitted(map_description({**payload, "description": "Another text."}, TRACK)).record
    assert other["detection_id"] != record["detection_id"]  # a regenerated description is a new detection


def test_a_description_takes_the_time_score_and_zones_of_its_tracks_latest_detection() -> None:
    """It may arrive a minute after the object ended, after updates the state policy skipped: placed at the latest
    detection, it falls in that detection's batch and is fast-path exactly when that detection was."""
    latest = TrackDetection.from_record(
        emitted(map_event(message("new", current_zones=["street", "driveway"]), RES)).record
    )
    assert latest.current_zones == ("street", "driveway") and latest.entered_zones == ("street", "driveway")
    payload = {"type": "description", "id": TRACK.track_id, "description": "A red car parks."}
    record = emitted(map_description(payload, TRACK, latest)).record
    assert (record["ts"], record["label"], record["confidence"]) == (latest.ts, "car", 0.86)
    assert record["zone"] == "street,driveway" and record["enrichment"]["frigate"]["follows"] == latest.detection_id
    assert record["enrichment"]["frigate"]["current_zones"] == ["street", "driveway"]
    assert isinstance(to_detection(emitted(map_description(payload, TRACK, latest)), "", source="s", line_no=1), tuple)


def test_a_description_carries_the_identity_frigate_recognised_on_its_track() -> None:
    """A resident's description is often a fast-path batch of its own: without her face it read as a stranger at the
    door at night. A sub_label hsi wrote itself ("risk high") is no identity, so none is carried."""
    face = emitted(map_event(message("update", sub_label=["alice", 0.93]), RES)).record
    payload = {"type": "description", "id": TRACK.track_id, "description": "A woman walks to the door."}
    record = emitted(map_description(payload, TRACK, TrackDetection.from_record(face))).record
    assert record["enrichment"]["reid"] == {"identity": "alice", "known": True, "score": 0.93}
    written_back = emitted(map_event(message("update", sub_label=["risk high", None]), RES)).record
    record = emitted(map_description(payload, TRACK, TrackDetection.from_record(written_back))).record
    assert "reid" not in record["enrichment"]


def test_a_long_description_is_cut_to_the_bound_and_the_cut_recorded() -> None:
    payload = {"type": "description", "id": TRACK.track_id, "description": "x" * (MAX_TEXT_CHARS + 10)}
    record = emitted(map_description(payload, TRACK)).record
    assert len(record["enrichment"]["florence"]["caption"]) == MAX_TEXT_CHARS
    assert record["enrichment"]["frigate"]["description_cut_from_chars"] == MAX_TEXT_CHARS + 10
    assert isinstance(to_detection(emitted(map_description(payload, TRACK)), "", source="s", line_no=1), tuple)


def test_a_description_without_its_track_or_text_is_invalid_and_other_updates_are_ignored() -> None:
    payload = {"type": "description", "id": "unknown-id", "description": "text"}
    outcome = map_description(payload, None)
    assert isinstance(outcome, Invalid) and outcome.reason.startswith("id:")
    empty = map_description({**payload, "description": " "}, TRACK)
    assert isinstance(empty, Invalid) and empty.reason.startswith("description:")
    assert map_description({"type": "face", "id": "x", "name": "bob"}, None) == Skip(SKIP_NOT_A_DETECTION)


def test_track_from_event_keeps_the_end_time_once_ended() -> None:
    track = track_from_event(message("end", end_time=1796159400.0))
    assert track == Track("1796159100.000000-w1un94", "driveway", "car", 0.88, 1796159400.0)
    assert track_from_event({"type": "new", "after": {"id": 3}}) is None


# ------------------------------------------------------------------------------------------------ API items
def api_item(**changes: Any) -> dict[str, Any]:
    item = {
        "id": "1796161800.000000-ebhmhz",
        "camera": "backyard",
        "label": "person",
        "sub_label": "bob",
        "zones": ["lawn", "shed"],
        "start_time": 1796161800.0,
        "end_time": 1796161870.7,
        "false_positive": False,
        "top_score": None,
        "box": None,
        "data": {
            "box": [0.46875, 0.375, 0.0703125, 0.3472222],
            "top_score": 0.86,
            "score": 0.8,
            "sub_label_score": 0.77,
            "description": "A person stands by the shed.",
            "type": "object",
        },
    }
    item.update(changes)
    return item


def test_an_api_item_is_one_detection_with_its_relative_box_converted() -> None:
    record = emitted(map_api_event(api_item())).record
    assert record["detection_id"] == "frigate:1796161800.000000-ebhmhz:api"
    assert record["bbox"] == [0.46875, 0.375, round(0.46875 + 0.0703125, 6), round(0.375 + 0.3472222, 6)]
    assert record["confidence"] == 0.86 and record["zone"] == "lawn,shed"
    assert record["enrichment"]["reid"] == {"identity": "bob", "known": True, "score": 0.77}
    assert record["enrichment"]["florence"]["caption"] == "A person stands by the shed."
    assert record["enrichment"]["frigate"]["end_time"] == "2026-12-01T21:51:10.700000Z"
    edge = emitted(map_api_event(api_item(data={"box": [0.5, 0.5, 0.5000001, 0.5], "top_score": 0.9}))).record
    assert edge["bbox"][2] == 1.0  # float rounding past the frame edge is clamped


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"data": {"box": [0.9, 0.1, 0.5, 0.5], "top_score": 0.8}}, "data.box"),
        ({"data": {"box": None}}, "data.top_score"),
        ({"start_time": None}, "start_time"),
        ({"camera": ""}, "camera"),
        ({"data": "x"}, "data"),
    ],
)
def test_a_malformed_api_item_names_its_field(changes: dict, field: str) -> None:
    outcome = map_api_event(api_item(**changes))
    assert isinstance(outcome, Invalid) and outcome.reason.split(":", 1)[0] == field, outcome


# ------------------------------------------------------------------------------------------------ shapes, config
def test_topic_lines_and_payload_kinds() -> None:
    assert split_topic('frigate/events {"type": "new"}') == ("frigate/events", '{"type": "new"}')
    assert split_topic('  {"a": 1}') == (None, '{"a": 1}')
    assert payload_kind({}, "frigate/reviews") == "reviews"
    assert payload_kind({}, "frigate/stats") == "other"
    assert payload_kind({}, "home/frigate/tracked_object_update") == "tracked_object_update"
    assert payload_kind(message()) == "events"
    assert payload_kind({"type": "new", "after": {"severity": "alert"}}) == "reviews"
    assert payload_kind({"type": "description", "id": "x", "description": "d"}) == "tracked_object_update"
    assert payload_kind(api_item()) == "api_event"


def test_detect_resolutions_per_camera_with_the_top_level_default() -> None:
    config = {
        "detect": {"width": 1280, "height": 720},
        "cameras": {"a": {"detect": {"width": 640, "height": 480}}, "b": {"detect": {"fps": 5}}, "c": {}},
    }
    found = detect_resolutions(config)
    assert found.by_camera == {"a": (640, 480), "b": (1280, 720), "c": (1280, 720)}
    native = detect_resolutions({"cameras": {"a": {"detect": {"width": 640}}}})
    assert native.by_camera == {} and native.unknown == ("a",)
    with pytest.raises(FrigateConfigError, match=r"cameras\.a\.detect\.width"):
        detect_resolutions({"cameras": {"a": {"detect": {"width": "wide", "height": 480}}}})
    with pytest.raises(FrigateConfigError, match="cameras"):
        detect_resolutions({"mqtt": {}})


# ------------------------------------------------------------------------------------------------ API cursor
def item(identifier: str, start: float, end: float | None) -> dict[str, Any]:
    return {"id": identifier, "start_time": start, "end_time": end}


def test_the_cursor_moves_past_finished_events_and_holds_before_one_in_progress() -> None:
    now = 10_000.0
    items = [item("a", 9100, 9150), item("b", 9200, None), item("c", 9300, 9350), item("d", 9400, now - 5)]
    plan = plan_api_pull(items, ApiCursor(9050.0), now=now, settle_seconds=30, max_hold_seconds=3600)
    assert [i["id"] for i in plan.ready] == ["a", "c"]
    assert plan.cursor == ApiCursor(9100.0, frozenset({"c"})) and plan.waiting == 2
    # next tick: b has ended, d settled; c is not ingested twice
    items = [item("b", 9200, now + 10), item("c", 9300, 9350), item("d", 9400, now - 5)]
    plan = plan_api_pull(items, plan.cursor, now=now + 60, settle_seconds=30, max_hold_seconds=3600)
    assert [i["id"] for i in plan.ready] == ["b", "d"] and plan.cursor == ApiCursor(9400.0) and plan.waiting == 0


def test_an_event_in_progress_too_long_stops_holding_the_cursor() -> None:
    plan = plan_api_pull(
        [item("car", 100, None)], ApiCursor(), now=100 + 7200, settle_seconds=30, max_hold_seconds=3600
    )
    assert [i["id"] for i in plan.ready] == ["car"] and plan.cursor.after == 100


def test_equal_start_times_do_not_let_the_cursor_skip_a_waiting_event() -> None:
    items = [item("a", 100, 110), item("b", 100, None)]
    plan = plan_api_pull(items, ApiCursor(50), now=1000, settle_seconds=30, max_hold_seconds=3600)
    assert plan.cursor.after == 50 and plan.cursor.seen == {"a"}
    assert ApiCursor.from_json(plan.cursor.to_json()) == plan.cursor
