"""The alert before the LLM (core/verdict/evidence_alerts.py): one per camera + track + cooldown slot, deterministic
keys, a weapon beside a person judged with the person, nothing for calm or free-text-only evidence."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hsi_dagster.core.context.camera_profiles import CameraProfile
from hsi_dagster.core.verdict.evidence_alerts import EVIDENCE_ONLY, alert_key, evidence_alerts

PROFILE = CameraProfile(
    camera_id="back", timezone="Europe/Paris", zones=["patio", "lawn", "street"], entry_zones=["patio"]
)
PROFILES = {"back": PROFILE}
NIGHT = datetime(2026, 12, 2, 2, 10, tzinfo=UTC)  # 03:10 in Paris
DAY = datetime(2026, 12, 2, 13, 0, tzinfo=UTC)
STRANGER = {"reid": {"identity": "unknown", "known": False, "score": 0.3}}
COOLDOWN = 600.0


def frames(
    start: datetime, track: str | None, label: str = "person", n: int = 3, zone: str = "street", **enrichment: Any
) -> list[dict[str, Any]]:
    return [
        {
            "detection_id": f"{track or label}-{start:%H%M%S}-{i}",
            "camera_id": "back",
            "ts": start + timedelta(seconds=2 * i),
            "label": label,
            "confidence": 0.9,
            "track_id": track,
            "zone": zone,
            "enrichment": {"florence": {"caption": "a person"}, **STRANGER, **enrichment},
        }
        for i in range(n)
    ]


def alerts_for(detections, new=None):
    ids = [d["detection_id"] for d in detections] if new is None else new
    return evidence_alerts(detections, ids, PROFILES, cooldown_seconds=COOLDOWN)


def test_a_knife_beside_a_person_is_one_critical_alert_keyed_by_the_persons_track():
    person = frames(DAY, "t1")
    knife = frames(DAY + timedelta(seconds=1), "k9", label="knife", n=2)
    alerts = alerts_for(person + knife)
    assert [(a.track_id, a.risk_level) for a in alerts] == [("t1", "critical")]
    alert = alerts[0]
    assert alert.alert_key == alert_key("back", "t1", DAY, COOLDOWN) == f"back:t1:{int(DAY.timestamp() // 600)}"
    assert "weapon" in alert.reasons[0] and alert.detected_at == max(d["ts"] for d in person)
    payload = alert.payload()
    assert payload["kind"] == EVIDENCE_ONLY and payload["batch_id"] is None and payload["risk_score"] == 90
    assert payload["summary"].startswith("Evidence alone (critical), before any LLM verdict: weapon")


def test_the_same_track_seen_again_gives_the_same_key_and_a_calm_scene_gives_none():
    first = frames(DAY, "t1", action={"label": "prying", "score": 0.9}, zone="patio")
    more = first + frames(DAY + timedelta(seconds=20), "t1", action={"label": "prying", "score": 0.9}, zone="patio")
    keys = {a.alert_key for a in alerts_for(first)} | {a.alert_key for a in alerts_for(more)}
    assert len(keys) == 1
    assert alerts_for(frames(DAY, "t2")) == []  # a stranger walking by in daylight
    lying = frames(DAY, "t3", florence={"caption": "a man with a gun"})  # free text never alerts
    assert alerts_for(lying) == []


def test_only_groups_with_new_detections_are_judged():
    old = frames(NIGHT, "t1", zone="patio")  # a stranger at the back door at 03:10: high
    new = frames(DAY, "t2")
    assert [a.risk_level for a in alerts_for(old)] == ["high"]
    assert alerts_for(old + new, new=[d["detection_id"] for d in new]) == []


def test_untracked_detections_share_one_key_per_camera_and_cooldown_slot():
    loose = frames(DAY, None, label="knife", n=2) + frames(DAY + timedelta(seconds=5), None, label="knife", n=2)
    alerts = alerts_for(loose)
    assert len(alerts) == 1 and alerts[0].track_id is None
    assert alerts[0].alert_key == f"back:-:{int(DAY.timestamp() // 600)}"
    later = frames(DAY + timedelta(seconds=COOLDOWN), None, label="knife", n=2)
    assert {a.alert_key for a in alerts_for(loose + later)} == {
        f"back:-:{int(DAY.timestamp() // 600)}",
        f"back:-:{int(DAY.timestamp() // 600) + 1}",
    }


def test_household_exceptions_lift_presence_alerts_only():
    """An exception (the household marked a stranger on the lawn at 02-04h harmless) stops that presence alert; a
    forcing act in the same pattern still alerts, and a person at the entry zone at night is never lifted."""
    from hsi_dagster.core.verdict.exceptions import HouseholdException, Pattern

    garden = CameraProfile(
        camera_id="back",
        timezone="Europe/Paris",
        zones=["patio", "lawn", "street"],
        entry_zones=["patio"],
        private_zones=["lawn"],
    )

    def exception(zone: str) -> HouseholdException:
        pattern = Pattern("back", ("person",), (zone,), 2)
        return HouseholdException(
            pattern, 3, NIGHT - timedelta(days=3), NIGHT - timedelta(days=1), NIGHT + timedelta(days=29)
        )

    def judged(detections, *exceptions):
        ids = [d["detection_id"] for d in detections]
        return evidence_alerts(
            detections,
            ids,
            {"back": garden},
            cooldown_seconds=COOLDOWN,
            exceptions={"back": list(exceptions)},
            at=NIGHT,
        )

    on_lawn = frames(NIGHT, "t1", zone="lawn")
    (alone,) = judged(on_lawn)
    assert alone.risk_level == "high" and alone.reasons[0].startswith("person at night")
    assert judged(on_lawn, exception("lawn")) == []
    assert [a.risk_level for a in judged(on_lawn, exception("street"))] == ["high"]  # another pattern: no lift

    prying = frames(NIGHT, "t2", zone="lawn", action={"label": "prying", "score": 0.9})
    (forcing,) = judged(prying, exception("lawn"))
    assert forcing.risk_level == "high" and forcing.risk_score == 75 and forcing.reasons[0].startswith("forcing")
    assert any("lifted: the household marked 3 similar events harmless" in r for r in forcing.reasons)
    knife = frames(NIGHT, "t3", zone="lawn") + frames(NIGHT + timedelta(seconds=1), "k3", label="knife", n=2)
    assert [a.risk_level for a in judged(knife, exception("lawn"))] == ["critical"]

    at_the_door = frames(NIGHT, "t4", zone="patio")
    (door,) = judged(at_the_door, exception("patio"))
    assert door.risk_level == "high" and any("not applied" in r for r in door.reasons)
