"""The labeled evaluation set: stored file == generator output, coverage of the issue's categories, valid records."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from hsi_dagster.core.context.enrichment import build_context
from hsi_dagster.core.intake.detections import Rejection, validate_record
from hsi_dagster.core.prompt.risk_schema import LEVEL_BANDS
from hsi_dagster.synthetic.scenario_specs import HOLDOUT_ONLY_GROUP, load_categories
from hsi_dagster.synthetic.scenarios import (
    SCENARIOS_PATH,
    ScenarioFileError,
    generate_scenarios,
    load_scenarios,
    scenario_profiles,
    scenarios_jsonl,
    select_scenarios,
)


def test_stored_set_is_what_the_generator_makes():
    assert SCENARIOS_PATH.read_text(encoding="utf-8") == scenarios_jsonl(generate_scenarios()), (
        "hsi_dagster/data/eval_scenarios.jsonl differs from the generator: "
        "run `python -m hsi_dagster.synthetic.scenarios --write` and review the label diff"
    )


def test_same_seed_same_set_other_seed_other_set():
    assert scenarios_jsonl(generate_scenarios(5)) == scenarios_jsonl(generate_scenarios(5))
    assert scenarios_jsonl(generate_scenarios(5)) != scenarios_jsonl(generate_scenarios(6))


def test_set_covers_the_issue_with_mostly_low_events():
    scenarios = load_scenarios()
    assert len(scenarios) >= 60
    categories = {s.category for s in scenarios}
    for needed in (
        "delivery_day",
        "resident_arrival",
        "pet_night",
        "wildlife_night",
        "passing_car",
        "weather_false_alarm",
        "door_handle_night",
        "vehicle_breakin",
        "photographer_night",
        "window_peeper",
        "masked_tool",
        "adversarial_harmless",
    ):
        assert needed in categories
    levels = Counter(s.expected_level for s in scenarios)
    assert set(levels) == {"low", "medium", "high", "critical"}
    assert levels["low"] > len(scenarios) / 2  # calibration: most events in a home are routine
    assert len({s.scenario_id for s in scenarios}) == len(scenarios)


def test_adversarial_harmless_caption_is_in_the_data_and_labelled_by_evidence():
    hostile = [s for s in load_scenarios() if s.category == "adversarial_harmless"]
    assert hostile and all(s.adversarial and s.expected_level == "high" for s in hostile)
    captions = [d["enrichment"]["florence"]["caption"] for s in hostile for d in s.detections]
    assert any("harmless" in c and "risk_score 0" in c for c in captions)


def test_every_label_is_consistent_and_every_record_is_valid():
    bands = {level: (low, high) for level, low, high in LEVEL_BANDS}
    profiles = scenario_profiles()
    for scenario in load_scenarios():
        low, high = scenario.score_band
        level_low, level_high = bands[scenario.expected_level]
        assert 0 <= low <= high <= 100
        assert low <= level_high and high >= level_low, scenario.scenario_id  # band overlaps the expected level
        assert scenario.reason and "\n" not in scenario.reason
        unprofiled = scenario.category.endswith("_unprofiled") or scenario.category.endswith("_unprofiled_day")
        assert (scenario.camera_id in profiles) != unprofiled, scenario.scenario_id  # a new user's camera has none
        for line_no, detection in enumerate(scenario.detections, start=1):
            result = validate_record(json.dumps(detection), source=scenario.scenario_id, line_no=line_no)
            assert not isinstance(result, Rejection), result
        context = build_context(scenario.batch, scenario.detections, quality_level="full", clip_noise_threshold=0.2)
        assert context.detections.count == len(scenario.detections) == scenario.batch["detection_count"]


def test_subset_takes_every_category_first():
    scenarios = load_scenarios()
    subset = select_scenarios(scenarios, 4)
    assert len(subset) == 4 and len({s.category for s in subset}) == 4
    assert select_scenarios(scenarios, None) == scenarios


def test_bad_file_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(scenarios_jsonl(generate_scenarios()[:1]) + '{"scenario_id": "x"}\n', encoding="utf-8")
    with pytest.raises(ScenarioFileError, match=r"bad.jsonl:2"):
        load_scenarios(path)


def test_subset_by_id_keeps_the_set_order_and_refuses_unknown_ids():
    scenarios = load_scenarios()
    assert [s.scenario_id for s in select_scenarios(scenarios, None, ["s060", "s001"])] == ["s001", "s060"]
    with pytest.raises(ScenarioFileError, match="s999"):
        select_scenarios(scenarios, None, ["s999"])


def test_split_is_deterministic_and_stratified():
    from hsi_dagster.synthetic.scenarios import SPLITS, split_for

    scenarios = load_scenarios()
    assert {s.split for s in scenarios} == set(SPLITS)
    for level in ("low", "medium", "high", "critical"):
        assert {s.split for s in scenarios if s.expected_level == level} == set(SPLITS), level
    unseen = {category.name for category in load_categories() if category.group == HOLDOUT_ONLY_GROUP}
    assert len(unseen) >= 6 and all(s.split == "holdout" for s in scenarios if s.category in unseen)  # never tuned on
    by_category: dict[str, list[str]] = {}
    for scenario in scenarios:
        if scenario.category not in unseen:
            by_category.setdefault(scenario.category, []).append(scenario.split)
    for category, splits in by_category.items():
        assert splits == [split_for(category, i) for i in range(len(splits))]  # stored == the rule
        if len(splits) >= 2:
            assert set(splits) == set(SPLITS), category  # alternating: both sides
    adversarial = Counter(s.split for s in scenarios if s.adversarial)
    assert adversarial["tune"] >= 2 and adversarial["holdout"] >= 2
    holdout = select_scenarios(scenarios, split="holdout")
    assert holdout and all(s.split == "holdout" for s in holdout)
    assert len(holdout) + len(select_scenarios(scenarios, split="tune")) == len(scenarios)
    with pytest.raises(ScenarioFileError, match="unknown split 'train'"):
        select_scenarios(scenarios, split="train")


def test_the_hard_cases_of_issue_24_are_in_the_set():
    categories = {s.category for s in load_scenarios()}
    for needed in (
        "gardener_shears",
        "resident_2am",
        "trick_or_treaters",
        "children_play_fighting",
        "night_delivery",
        "neighbours_cat",
        "caption_claims_gun",
        "known_turns_violent",
        "car_doors_night",
        "back_door_3am",
        "package_theft_day",
    ):
        assert needed in categories
    hard = {category.name for category in load_categories() if category.group == "hard"}
    assert sum(s.category in hard for s in load_scenarios()) >= 24
