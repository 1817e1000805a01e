"""The cross-camera set through the evaluation engine, floor only (no LLM): with visits the casing visit climbs
low -> medium -> high and its third batch names the visit; without visits it stays low (the rows differ); no
harmless situation is raised to an alert. The one harmless situation a visit rule raises (two strangers passing on
two cameras at once, linked by time alone) is pinned here as measured, not hidden."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hsi_dagster.evaluation.configurations import VISITS_SET, floor_configurations, for_set, set_of
from hsi_dagster.evaluation.engine import evaluate_floor_only
from hsi_dagster.evaluation.visit_set import combine_by_situation, load_visit_set, situation_rows
from hsi_dagster.settings import HsiSettings
from hsi_dagster.synthetic.scenarios import ScenarioFileError, scenarios_jsonl
from hsi_dagster.synthetic.visit_situations import HARMLESS, SITUATIONS, visit_profiles


@pytest.fixture(scope="module")
def runs():
    """{visits on/off: (per-batch results by id, combined results by situation)}"""
    settings = HsiSettings(_env_file=None)
    scenarios = load_visit_set()
    out = {}
    for configuration in for_set(floor_configurations(["full"], visits=[False, True]), VISITS_SET):
        results = evaluate_floor_only(configuration, scenarios, settings, visit_profiles()).results
        batches = results[configuration.floor_name]
        combined = combine_by_situation(configuration.floor_name, batches)
        out[configuration.visits] = ({r.scenario_id: r for r in batches}, {r.scenario_id: r for r in combined})
    return out


def test_names_keep_the_set_apart():
    names = [c.floor_name for c in for_set(floor_configurations(["full"], visits=[False, True]), VISITS_SET)]
    assert names == ["visits.floor.full", "visits.floor.full.visits"]
    assert {set_of(name) for name in names} == {VISITS_SET}
    assert set_of("floor.full.visits") == "" and set_of("frigate.floor.full.visits") == "frigate"


def test_with_visits_the_casing_visit_is_high_on_its_third_batch(runs):
    batches, combined = runs[True]
    levels = [batches[f"casing_visit.b{n}"].predicted for n in (1, 2, 3)]
    assert levels == ["low", "medium", "high"]
    third = batches["casing_visit.b3"]
    assert third.floor_reasons[0] == (
        "visit visit:eval:casing_visit.b1: third camera in 6 minutes: front_door 02:30, driveway 02:32, "
        "side_gate 02:35 (a person not known at night) -> 70 high"
    )
    assert combined["casing_visit"].expected_level == combined["casing_visit"].predicted == "high"
    second = batches["second_visit_tonight.b3"].floor_reasons[0]
    assert "second visit tonight: visit:eval:second_visit_tonight.b1 at 00:50" in second


def test_without_visits_the_casing_visit_stays_low(runs):
    batches, combined = runs[False]
    assert [batches[f"casing_visit.b{n}"].predicted for n in (1, 2, 3)] == ["low", "low", "low"]
    assert combined["casing_visit"].predicted == "low"
    assert not any("visit visit:" in " ".join(r.floor_reasons) for r in batches.values())


def test_harmless_situations_stay_below_an_alert_and_the_rows_differ(runs):
    harmless = {s.situation_id for s in SITUATIONS if s.kind == HARMLESS}
    with_visits, without = runs[True][1], runs[False][1]
    # two strangers walking past two cameras at once are linked by time, but nobody stopped: no visit rule fires
    assert all(with_visits[sid].predicted == "low" for sid in harmless)
    assert all(without[sid].predicted == "low" for sid in harmless)
    on, off = situation_rows(list(with_visits.values())), situation_rows(list(without.values()))
    assert (on.caught, on.threats, on.false_alarms, on.harmless, on.harmless_above_low) == (4, 4, 0, 6, 0)
    assert (off.caught, off.threats, off.false_alarms, off.harmless, off.harmless_above_low) == (2, 4, 0, 6, 0)
    assert (on.correct, off.correct, on.situations) == (10, 8, 10)
    assert "recall(high+critical), threats: 4 of 4 (100%)" in on.lines()


def test_a_batch_without_a_situation_is_refused_naming_it(tmp_path):
    scenarios = load_visit_set()
    path = tmp_path / "bad.jsonl"
    path.write_text(scenarios_jsonl([*scenarios[:2], replace(scenarios[2], situation=None)]), encoding="utf-8")
    with pytest.raises(ScenarioFileError, match=rf"{scenarios[2].scenario_id} needs a `situation`"):
        load_visit_set(path)
    with pytest.raises(ScenarioFileError, match="unknown situation or batch id"):
        load_visit_set(ids=["nobody"])
    assert {s.situation for s in load_visit_set(ids=["casing_visit.b2"])} == {"casing_visit"}  # whole situation


def test_the_project_set_is_unchanged_by_visits():
    """Each project scenario is one batch on one camera written on its own day: its own site, so no visit rule can
    fire and the rows are identical by construction (measured, not assumed)."""
    from hsi_dagster.synthetic.scenarios import load_scenarios

    settings = HsiSettings(_env_file=None)
    scenarios = load_scenarios()
    levels = {}
    for configuration in floor_configurations(["full"], visits=[False, True]):
        results = evaluate_floor_only(configuration, scenarios, settings).results[configuration.floor_name]
        levels[configuration.visits] = [(r.scenario_id, r.risk_score, r.floor_reasons) for r in results]
    assert levels[True] == levels[False] and len(levels[True]) == len(scenarios)
