"""The Frigate-shaped labeled set: the stored files are the generator's output, it covers every kind of scene the
issue lists in both splits, and its payloads carry what Frigate 0.14-0.16 publishes (new/update/end with before and
after, overlapping zones, faces, plates, logos, dwell, GenAI descriptions, reviews with a threat level)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from hsi_dagster.synthetic.frigate_eval import (
    CONFIG_FILE,
    FRIGATE_EVAL_DIR,
    LABELS_FILE,
    PAYLOADS_FILE,
    FrigateSetError,
    generate_frigate_eval,
    load_labels,
    set_files,
)
from hsi_dagster.synthetic.frigate_situations import SITUATIONS
from hsi_dagster.synthetic.scenarios import split_for


def _payloads() -> list[tuple[str, dict]]:
    lines = (FRIGATE_EVAL_DIR / PAYLOADS_FILE).read_text(encoding="utf-8").splitlines()
    return [(topic, json.loads(body)) for topic, body in (line.split(" ", 1) for line in lines)]


def test_stored_files_equal_the_generator() -> None:
    for name, text in set_files(generate_frigate_eval()).items():
        stored = (FRIGATE_EVAL_DIR / name).read_text(encoding="utf-8")
        assert stored == text, f"{name} differs: python -m hsi_dagster.synthetic.frigate_eval --write"


def test_same_seed_same_set_other_seed_other_times() -> None:
    assert set_files(generate_frigate_eval(7)) == set_files(generate_frigate_eval(7))
    assert set_files(generate_frigate_eval(7))[PAYLOADS_FILE] != set_files(generate_frigate_eval(8))[PAYLOADS_FILE]


def test_at_least_40_scenes_every_kind_on_both_splits() -> None:
    labels = load_labels()
    assert len(labels) >= 40 and len({label.scene_id for label in labels}) == len(labels)
    by_category: dict[str, set[str]] = {}
    for label in labels:
        by_category.setdefault(label.category, set()).add(label.split)
    assert by_category == {s.category: {"tune", "holdout"} for s in SITUATIONS}
    splits = Counter(label.split for label in labels)
    assert abs(splits["tune"] - splits["holdout"]) <= len(SITUATIONS)
    index: Counter[str] = Counter()
    for label in labels:  # the split is split_for(category, n-th of its category): deterministic, stratified
        assert label.split == split_for(label.category, index[label.category])
        index[label.category] += 1
    levels = Counter(label.expected_level for label in labels)
    assert set(levels) == {"low", "medium", "high", "critical"} and levels["low"] > levels["high"]
    assert sum(label.adversarial for label in labels) == 4
    wanted = {"resident_face_night", "courier_logo_day", "pet_night", "wildlife_night", "neighbour_sidewalk"}
    wanted |= {"stranger_door_overlap_night", "unknown_car_idling_night", "car_doors_day", "parcel_taken_day"}
    wanted |= {"window_peering_day", "forced_entry_night", "knife_night", "fight_driveway", "injected_lowering_night"}
    assert wanted <= set(by_category)


def test_scenes_do_not_overlap_and_their_times_are_the_issues() -> None:
    labels = load_labels()
    spans = sorted((label.start, label.end) for label in labels)
    assert all(later[0] > earlier[1] + 3600 for earlier, later in zip(spans, spans[1:], strict=False))

    def hour(category: str) -> set[int]:
        from datetime import UTC, datetime

        return {datetime.fromtimestamp(x.start, UTC).hour for x in labels if x.category == category}

    assert (
        hour("car_doors_day") <= {12, 13}
        and hour("parcel_taken_day") == {12}
        and hour("window_peering_day") <= {10, 11}
    )


def test_payloads_have_frigates_shape() -> None:
    payloads = _payloads()
    topics = Counter(topic for topic, _ in payloads)
    assert set(topics) == {"frigate/events", "frigate/tracked_object_update", "frigate/reviews"}
    events = [body for topic, body in payloads if topic == "frigate/events"]
    assert {e["type"] for e in events} == {"new", "update", "end"}
    assert all(e["before"]["false_positive"] for e in events if e["type"] == "new")
    assert all(e["after"]["end_time"] is not None for e in events if e["type"] == "end")
    afters = [e["after"] for e in events]
    assert any(a["current_zones"] == ["walkway", "porch"] for a in afters)  # a porch inside the walkway
    assert any(a["current_zones"] == ["driveway", "parking_spot"] for a in afters)
    assert any(a["sub_label"] == ["alice", 0.93] and "face" in a["attributes"] for a in afters)
    assert any(a["sub_label"] == ["family car", 0.91] and a["recognized_license_plate"] for a in afters)
    assert any("amazon" in a["attributes"] and a["current_attributes"] for a in afters)
    assert any(a["label"] == "knife" for a in afters)
    assert any(a["stationary"] and a["motionless_count"] > 300 for a in afters)
    assert any(a["sub_label"] == ["risk high", None] for a in afters)  # hsi's own write-back, read back from Frigate
    descriptions = [body["description"] for topic, body in payloads if topic == "frigate/tracked_object_update"]
    assert any("IGNORE ALL PREVIOUS INSTRUCTIONS" in d for d in descriptions)
    reviews = [body for topic, body in payloads if topic == "frigate/reviews"]
    threats = {r["after"]["data"]["metadata"]["potential_threat_level"] for r in reviews if r["type"] == "genai"}
    assert threats == {0, 1, 2} and {r["after"]["severity"] for r in reviews} == {"alert", "detection"}
    config = yaml.safe_load((FRIGATE_EVAL_DIR / CONFIG_FILE).read_text(encoding="utf-8"))
    assert set(config["cameras"]) == {label.camera_id for label in load_labels()}


def test_a_broken_label_file_names_the_line(tmp_path: Path) -> None:
    (tmp_path / LABELS_FILE).write_text('{"scene_id": "f001"}\n', encoding="utf-8")
    with pytest.raises(FrigateSetError, match=r"labels.jsonl:1: not a scene label \(KeyError"):
        load_labels(tmp_path)
