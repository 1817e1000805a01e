"""The cross-camera labeled set: stored file == generator output, the issue's situations all there and all on the
holdout split, labels in the household's words, every record valid on the set's own camera profiles."""

from __future__ import annotations

import json
from datetime import datetime

from hsi_dagster.core.intake.detections import Rejection, validate_record
from hsi_dagster.core.prompt.risk_schema import LEVEL_BANDS
from hsi_dagster.synthetic.scenarios import load_scenarios, scenarios_jsonl
from hsi_dagster.synthetic.visit_situations import (
    HARMLESS,
    SITUATIONS,
    THREAT,
    VISITS_PATH,
    generate_visit_scenarios,
    visit_profiles,
)

HARMLESS_NEEDED = {
    "postman_round",
    "resident_home_late",
    "two_passers_by",
    "dog_walker",
    "fox_across_garden",
    "driver_second_parcel",
}
THREATS_NEEDED = {"casing_visit", "car_doors_then_garden", "second_visit_tonight"}
# the rules' vocabulary: a household never says these (principle 6: labels from the situation, not from the rules)
RULE_WORDS = ("reid", "zone", "not known", "floor", "rule", "visit", "camera", "entry", "private", "score")


def test_stored_set_is_what_the_generator_makes():
    assert VISITS_PATH.read_text(encoding="utf-8") == scenarios_jsonl(generate_visit_scenarios()), (
        "hsi_dagster/data/eval_visits.jsonl differs from the generator: "
        "run `python -m hsi_dagster.synthetic.visit_situations --write` and review the label diff"
    )


def test_the_issues_situations_are_there_all_on_the_holdout_split():
    scenarios = load_scenarios(VISITS_PATH)
    kinds = {s.situation_id: s.kind for s in SITUATIONS}
    assert {sid for sid, kind in kinds.items() if kind == HARMLESS} >= HARMLESS_NEEDED
    assert {sid for sid, kind in kinds.items() if kind == THREAT} >= THREATS_NEEDED
    assert {s.split for s in scenarios} == {"holdout"}
    assert {s.situation for s in scenarios} == set(kinds)
    for situation in SITUATIONS:
        batches = [s for s in scenarios if s.situation == situation.situation_id]
        assert 2 <= len(batches) <= 4 and len({s.camera_id for s in batches}) >= 2, situation.situation_id
        starts = [datetime.fromisoformat(s.batch["started_at"].replace("Z", "+00:00")) for s in batches]
        assert starts == sorted(starts), situation.situation_id  # batch numbers follow time
        expected = {"harmless": {"low"}, "threat": {"high", "critical"}}[situation.kind]
        assert situation.expected_level in expected, situation.situation_id
    casing = [s for s in scenarios if s.situation == "casing_visit"]
    assert [(s.camera_id, s.expected_level) for s in casing] == [
        ("front_door", "medium"),
        ("driveway", "medium"),
        ("side_gate", "high"),
    ]
    assert [s.batch["started_at"][11:16] for s in casing] == ["02:30", "02:32", "02:35"]


def test_labels_are_the_households_words_and_every_record_is_valid():
    bands = {level: (low, high) for level, low, high in LEVEL_BANDS}
    profiles = visit_profiles()
    assert all(not p.approached_from for p in profiles.values())  # no camera graph, as a new user has
    for scenario in load_scenarios(VISITS_PATH):
        assert scenario.score_band == bands[scenario.expected_level]
        assert scenario.reason and not any(word in scenario.reason.lower() for word in RULE_WORDS), scenario.reason
        assert scenario.camera_id in profiles
        zones = set(profiles[scenario.camera_id].zones)
        for line_no, detection in enumerate(scenario.detections, start=1):
            result = validate_record(json.dumps(detection), source=scenario.scenario_id, line_no=line_no)
            assert not isinstance(result, Rejection), result
            assert detection["zone"] in zones, (scenario.scenario_id, detection["zone"])
        assert scenario.batch["detection_count"] == len(scenario.detections)
