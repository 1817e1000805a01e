"""core/outbound/mqtt_messages.py and core/outbound/frigate_writeback.py: topics, sanitising, payloads, discovery,
planning, texts."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from hsi_dagster.core.outbound.frigate_writeback import (
    DONE,
    FAILED,
    RETRY,
    merged_description,
    outcome_for,
    sub_label_for,
    verdict_line,
)
from hsi_dagster.core.outbound.mqtt_messages import (
    HA_STATE_MAX_CHARS,
    StoredEvidenceAlert,
    StoredVerdict,
    TopicError,
    Topics,
    camera_key,
    check_topic_prefix,
    clean_text,
    discovery_messages,
    evidence_event_payload,
    plan_camera,
    reasons_from,
    state_payload,
    verdict_event_payload,
)

T0 = datetime(2026, 12, 4, 3, 0, tzinfo=UTC)
TOPICS = Topics("hsi", "homeassistant")


def verdict(batch: str, score: int, minutes: int, level: str, camera: str = "yard", **extra: object) -> StoredVerdict:
    moment = T0 + timedelta(minutes=minutes)
    return StoredVerdict(batch, camera, level, score, f"summary {batch}", ("r",), moment, moment, **extra)  # type: ignore[arg-type]


@pytest.mark.parametrize("prefix", ["hsi/#", "hsi/+/x", "+", "#", "$SYS/hsi", "a//b", "", "/", "a\x00b", "\udcff"])
def test_a_prefix_mqtt_cannot_publish_under_is_rejected_naming_the_setting(prefix: str) -> None:
    with pytest.raises(TopicError, match="MQTT_TOPIC_PREFIX"):
        check_topic_prefix(prefix, "MQTT_TOPIC_PREFIX")


def test_a_good_prefix_loses_its_outer_slashes() -> None:
    assert check_topic_prefix("/home/hsi/", "MQTT_TOPIC_PREFIX") == "home/hsi"


def test_camera_names_become_safe_distinct_slugs() -> None:
    assert camera_key("front_door").slug == "front_door"  # the usual names are kept as they are
    odd = [camera_key(name) for name in ("Front Door", "front/door", "front+door#", "Cámara ☃", "a.b", "")]
    for key in odd:
        assert key.slug and all(c.isalnum() or c in "_-" for c in key.slug), key
        assert key.slug.isascii() and len(key.slug) <= 48 + 9
    assert len({key.slug for key in odd}) == len(odd)
    assert camera_key("Cámara ☃").slug.startswith("Camara_")  # transliterated, then the hash
    # not UTF-8: bytes or a str with lone surrogates (os.fsdecode of a bad name) -> U+FFFD in the name, a stable slug
    raw = camera_key(b"gate\xff")
    assert raw.name == "gate\ufffd" and raw.slug == camera_key("gate\udcff").slug
    assert camera_key("x" * 200).slug != camera_key("x" * 199).slug
    assert len(camera_key("y" * 500).name) == 64


def test_text_is_cleaned_and_cut() -> None:
    assert clean_text("a\x00b\x1bc\nd", 50) == "abc\nd"
    assert clean_text("bad \udcff", 50) == "bad \ufffd"
    cut = clean_text("x" * 1000, HA_STATE_MAX_CHARS)
    assert len(cut) == HA_STATE_MAX_CHARS and cut.endswith("…")
    json.dumps(clean_text("\udcff" * 3, 10)).encode("utf-8")  # always encodable


def test_state_payload_carries_what_the_entities_read() -> None:
    state = state_payload(verdict("b1", 72, 0, "high", floor_score=65, model_score=40))
    assert (state["level"], state["score"], state["threat"], state["batch_id"]) == ("high", 72, "ON", "b1")
    assert (state["floor_score"], state["model_score"], state["reasons"]) == (65, 40, ["r"])
    assert state_payload(verdict("b2", 59, 0, "medium"))["threat"] == "OFF"
    long = StoredVerdict("b", "yard", "low", 1, "z" * 5000, (), None, T0)
    assert len(state_payload(long)["summary"]) == HA_STATE_MAX_CHARS


def test_the_state_and_the_phone_say_what_the_model_said_when_its_trust_held_the_level_down() -> None:
    held = verdict("b3", 29, 0, "low", model_score=92, model_level="critical", model_trust=0)
    held = StoredVerdict(**{**held.__dict__, "trust_reason": "measured trust 0"})
    state, event = state_payload(held), verdict_event_payload(held)
    assert (state["level"], state["model_level"], state["model_trust"]) == ("low", "critical", 0)
    assert (
        state["model_note"]
        == event["model_note"]
        == ("model said critical; not trusted for this model: measured trust 0")
    )
    trusted = verdict("b4", 92, 0, "critical", model_score=92, model_level="critical", model_trust=3)
    assert state_payload(trusted)["model_note"] is None  # stored as the model said: nothing to flag
    assert state_payload(verdict("b5", 20, 0, "low"))["model_note"] is None  # rows before migration 11


def test_reasons_are_read_leniently() -> None:
    assert reasons_from('["night at the door", "crowbar"]') == ("night at the door", "crowbar")
    assert reasons_from(None) == () and reasons_from("{") == ("{",) and reasons_from(42) == ()
    assert len(reasons_from(json.dumps([f"r{i}" for i in range(50)]))) == 10


def test_discovery_has_four_entities_and_two_correction_buttons_per_camera_with_home_assistants_fields() -> None:
    messages = discovery_messages(camera_key("yard"), TOPICS)
    assert [m.topic for m in messages] == [
        "homeassistant/sensor/hsi_yard/risk_level/config",
        "homeassistant/sensor/hsi_yard/risk_score/config",
        "homeassistant/sensor/hsi_yard/last_summary/config",
        "homeassistant/binary_sensor/hsi_yard/threat/config",
        "homeassistant/button/hsi_yard/false_alarm/config",
        "homeassistant/button/hsi_yard/real_threat/config",
    ]
    assert all(m.retain for m in messages)
    configs = [json.loads(m.payload) for m in messages]
    buttons = configs[4:]
    for button, level in zip(buttons, ("low", "high"), strict=True):
        # Home Assistant's MQTT button: a command topic and the payload a press sends; no state topic
        assert button["command_topic"] == "hsi/yard/correction" and "state_topic" not in button
        assert json.loads(button["payload_press"]) == {
            "batch_id": "latest",
            "level": level,
            "note": f"Home Assistant button: {button['name']}",
        }
        assert button["retain"] is False and button["device"]["identifiers"] == ["hsi_yard"]
    for config in configs[:4]:
        assert {"name", "unique_id", "state_topic", "availability_topic", "device", "qos"} <= set(config)
        assert config["device"]["identifiers"] == ["hsi_yard"]
    assert configs[0]["options"] == ["low", "medium", "high", "critical"] and configs[0]["device_class"] == "enum"
    # Home Assistant's sensor validation: options need device_class enum and exclude state_class and a unit
    assert "state_class" not in configs[0] and "unit_of_measurement" not in configs[0]
    assert "options" not in configs[1] and configs[1]["state_class"] == "measurement"
    assert configs[3]["payload_on"] == "ON" and configs[3]["device_class"] == "safety"


def test_plan_sends_every_threat_as_an_event_and_only_the_newest_verdict_as_state() -> None:
    verdicts = [verdict("b1", 70, 0, "high"), verdict("b2", 10, 1, "low"), verdict("b3", 90, 2, "critical")]
    alert = StoredEvidenceAlert("k1", "yard", "high", 65, ("crowbar",), T0 + timedelta(seconds=30), T0)
    units = plan_camera("yard", verdicts, [alert], None, TOPICS)
    assert [(u.key, u.sent) for u in units] == [
        ("verdict:b1", "event"),
        ("evidence:k1", "event"),
        ("verdict:b2", "superseded"),
        ("verdict:b3", "event+state"),
    ]
    assert [m.topic for m in units[-1].messages] == ["hsi/yard/event", "hsi/yard/state"]
    assert json.loads(units[1].messages[0].payload)["event_id"] == "evidence:k1"
    # a verdict older than the retained state does not replace it
    late = plan_camera("yard", [verdict("old", 10, 0, "low")], [], T0 + timedelta(hours=1), TOPICS)
    assert [(u.sent, u.messages) for u in late] == [("superseded", ())]


def test_evidence_event_names_its_reasons() -> None:
    alert = StoredEvidenceAlert("k", "yard", "critical", 90, ("weapon: knife",), T0, T0, track_id="t1", batch_id=None)
    payload = evidence_event_payload(alert)
    assert (payload["kind"], payload["threat"], payload["summary"], payload["track_id"]) == (
        "evidence",
        "ON",
        "weapon: knife",
        "t1",
    )


def test_frigate_writeback_texts_and_decisions() -> None:
    line = verdict_line("high", 72, "Person at the car.")
    assert line == "HSI risk: HIGH (72/100): Person at the car."
    assert merged_description("GenAI text.", line) == "GenAI text.\n\n" + line
    assert merged_description("GenAI text.\n\nHSI risk: LOW (5/100): old", line) == "GenAI text.\n\n" + line
    assert merged_description(None, line) == line
    assert sub_label_for("critical", {}) == "risk critical"
    assert sub_label_for("high", {"sub_label": "risk medium"}) == "risk high"
    assert sub_label_for("high", {"sub_label": ["Alice", 0.9]}) is None
    assert sub_label_for("medium", {}) is None
    assert [outcome_for(code) for code in (200, 204, None, 500, 503, 429, 404, 405, 422)] == [
        DONE,
        DONE,
        RETRY,
        RETRY,
        RETRY,
        RETRY,
        FAILED,
        FAILED,
        FAILED,
    ]
    assert len(verdict_line("critical", 99, "s" * 5000)) == 500


def test_the_state_names_the_batchs_visit() -> None:
    state = state_payload(
        verdict("b3", 70, 0, "high", visit_id="visit:b1", visit_cameras=("front_door", "side_gate"), visit_level="high")
    )
    assert (state["visit_id"], state["visit_cameras"], state["visit_level"]) == (
        "visit:b1",
        ["front_door", "side_gate"],
        "high",
    )
    alone = state_payload(verdict("b4", 10, 0, "low"))
    assert (alone["visit_id"], alone["visit_cameras"], alone["visit_level"]) == (None, [], None)
    events = [
        verdict_event_payload(verdict(b, 70, 0, "high", visit_id="visit:b1", visit_cameras=("a", "b"))) for b in "xy"
    ]
    assert [e["event_id"] for e in events] == ["visit:visit:b1:high", "visit:visit:b1:high"]  # one event per visit
    one_camera = verdict_event_payload(verdict("b5", 70, 0, "high", visit_id="visit:b5", visit_cameras=("a",)))
    assert one_camera["event_id"] == "verdict:b5"
