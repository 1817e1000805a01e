"""The evaluation engine without a server: one model reply per scenario gives the model's result, the result raised to
the evidence floor and the floor's alone; pass names and their stored configurations. The real-server path is in
tests/dagster/test_evaluation_asset.py and tests/cli/test_eval.py."""

from __future__ import annotations

import json

import pytest

from hsi_dagster.core.verdict.assessment import assess
from hsi_dagster.evaluation.configurations import (
    EvalConfiguration,
    configurations_for,
    default_configurations,
    floor_configurations,
)
from hsi_dagster.evaluation.scenario_run import prepare_scenario, run_prepared
from hsi_dagster.llm.protocol import ChatResult, Usage
from hsi_dagster.settings import load_settings
from hsi_dagster.synthetic.scenarios import load_scenarios, scenario_profiles

SETTINGS = load_settings("/nonexistent.env")


def _reply(score: int) -> ChatResult:
    body = {"risk_score": score, "risk_level": "low", "summary": "a person at the door", "reasoning": "routine"}
    return ChatResult(json.dumps(body), body, None, Usage(900, 60, 0), {"predicted_ms": 400.0}, "m", 500.0, "stop")


def _scenario(category: str):
    return next(s for s in load_scenarios() if s.category == category)


@pytest.mark.parametrize(("category", "model_score"), [("knife_at_door", 8), ("delivery_day", 8)])
def test_one_reply_three_results(category: str, model_score: int) -> None:
    configuration = EvalConfiguration("full", "full")
    prepared = prepare_scenario(
        _scenario(category),
        configuration=configuration,
        profiles=scenario_profiles(),
        settings=SETTINGS,
        estimate_budget=6000,
    )
    calls: list[list[dict]] = []

    def assess_call(messages: list[dict]):
        calls.append(messages)
        return assess(messages, lambda chat: _reply(model_score))

    model, with_floor, alone = run_prepared(prepared, configuration, assess_call, trust=0)
    assert len(calls) == 1  # the floor is code: one model call for the three
    assert [model.configuration, with_floor.configuration, alone.configuration] == [
        "full",
        "full.with-floor",
        "floor.full",
    ]
    assert model.risk_score == model_score and model.risk_level == "low" and model.llm_calls == 1
    assert alone.llm_calls == 0 and alone.risk_score == prepared.floor.score
    assert with_floor.risk_score == max(model_score, prepared.floor.score)
    assert with_floor.model_score == model_score and with_floor.floor_score == prepared.floor.score
    if category == "knife_at_door":
        assert with_floor.risk_level == "critical" and with_floor.decided_by == "floor"
        assert any("weapon" in reason for reason in with_floor.floor_reasons)
    else:
        assert with_floor.risk_level == "low" and with_floor.decided_by == "model"
    assert model.split == with_floor.split == alone.split == prepared.scenario.split


def test_pass_names_and_what_each_pass_stores() -> None:
    rubric = configurations_for(["http://gpu:8000"], ["full"], ["qwen"], schemas=["plain", "rubric"])
    assert [c.name for c in rubric] == ["qwen.full", "qwen.full.rubric"]
    assert rubric[1].stored_names() == ["qwen.full.rubric", "qwen.full.rubric.with-floor", "floor.full"]
    (floor,) = floor_configurations(["standard"])
    assert floor.llm is False and floor.stored_names() == ["floor.standard"]
    assert [c.name for c in default_configurations()] == ["full", "standard", "minimal", "full.rubric"]
    with pytest.raises(ValueError, match="schema 'json'"):
        EvalConfiguration("x", "full", schema="json")


def test_rubric_pass_scores_from_the_answers_and_sends_the_rubric_prompt() -> None:
    configuration = EvalConfiguration("full.rubric", "full", schema="rubric")
    prepared = prepare_scenario(
        _scenario("back_door_3am"),
        configuration=configuration,
        profiles=scenario_profiles(),
        settings=SETTINGS,
        estimate_budget=6000,
    )
    answers = dict.fromkeys(
        ("tries_door_or_window", "carries_tool_or_weapon", "face_concealed", "forced_entry_or_damage"), False
    ) | {"unknown_person": True, "violence": False, "takes_property": False, "loiters": False}
    body = {
        "observations": ["a person at the back door at night"],
        "rubric": answers,
        "risk_score": 8,
        "risk_level": "low",
        "summary": "a person at the back door",
        "reasoning": "unknown person at night",
    }
    reply = ChatResult(json.dumps(body), body, None, Usage(900, 80, 0), {}, "m", 400.0, "stop")
    system = prepared.messages[0]["content"] if prepared.messages else ""
    assert "rubric" in system  # the rubric schema's own instructions, as production sends them
    model, with_floor, alone = run_prepared(
        prepared, configuration, lambda messages: assess(messages, lambda chat: reply, "rubric"), trust=0
    )
    assert model.model_score is not None and model.model_score != 8  # the rubric score, not the number written
    assert alone.risk_level == "high"  # a stranger on the patio at 3 am
    assert with_floor.risk_score == max(model.model_score, alone.risk_score or 0)
