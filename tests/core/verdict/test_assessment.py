"""The call-and-repair loop with a plain callable: no Dagster, no server."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from jsonschema import Draft202012Validator

from hsi_dagster.core.prompt.risk_schema import RISK_JSON_SCHEMA, repair_messages
from hsi_dagster.core.verdict.assessment import INVALID_OUTPUT, OK, assess

MESSAGES = [{"role": "system", "content": "instructions"}, {"role": "user", "content": "batch"}]
GOOD = {"risk_score": 72, "risk_level": "high", "summary": "Someone tries car doors.", "reasoning": "Observed..."}


@dataclass
class Reply:
    content: str
    usage: int = 0


class Model:
    """Answers each call with the next scripted reply and records what it was sent."""

    def __init__(self, *replies: str):
        self.replies = list(replies)
        self.sent: list[list[dict]] = []

    def __call__(self, messages: list[dict]) -> Reply:
        self.sent.append(messages)
        return Reply(self.replies.pop(0), usage=len(self.sent))


def test_a_usable_first_reply_is_one_call():
    model = Model(json.dumps(GOOD))
    outcome = assess(MESSAGES, model)
    assert outcome.ok and not outcome.repaired and model.sent == [MESSAGES]
    fields = outcome.fields()
    assert fields["status"] == OK and fields["risk_score"] == 72 and fields["risk_level"] == "high"
    assert fields["assessment"]["summary"] == GOOD["summary"] and fields["raw_output"] == json.dumps(GOOD)
    assert [reply.usage for reply in outcome.replies] == [1]  # the caller's reply objects come back as they are
    assert "recommended_action" not in fields["assessment"]  # absent optional fields are left out, not null
    Draft202012Validator(RISK_JSON_SCHEMA).validate(fields["assessment"])


def test_an_unusable_reply_is_repaired_once_on_the_same_conversation():
    bad = '{"risk_score": 72, "risk_level": "high"}'  # summary and reasoning missing
    model = Model(bad, json.dumps(GOOD))
    outcome = assess(MESSAGES, model)
    assert outcome.ok and outcome.repaired and len(model.sent) == 2
    repair = model.sent[1]
    assert repair == repair_messages(MESSAGES, bad, "required field(s) missing or empty: summary, reasoning")
    assert repair[: len(MESSAGES)] == MESSAGES  # same prefix: the server's prompt cache is reused
    assert outcome.fields()["raw_output"] == json.dumps(GOOD)


def test_two_unusable_replies_are_invalid_output_with_both_errors_and_no_third_call():
    model = Model("I cannot help with that.", '{"risk_score": "high"}')
    outcome = assess(MESSAGES, model)
    assert not outcome.ok and len(model.sent) == 2
    fields = outcome.fields()
    assert fields["status"] == INVALID_OUTPUT and fields["raw_output"] == '{"risk_score": "high"}'
    assert "risk_score is missing or not a number" in fields["error"] and "no JSON object" in fields["error"]
    assert "risk_score" not in fields


def test_the_models_own_level_is_kept_beside_the_derived_one():
    model = Model(json.dumps({**GOOD, "risk_level": "low"}))  # score 72 is "high"
    fields = assess(MESSAGES, model).fields()
    assert fields["risk_level"] == "high" and fields["model_risk_level"] == "low"
    assert "model said risk_level 'low'" in fields["error"]


def test_errors_of_the_call_itself_propagate_without_a_repair():
    calls = []

    def down(messages):
        calls.append(messages)
        raise ConnectionError("127.0.0.1:9 refused")

    with pytest.raises(ConnectionError, match="127.0.0.1:9"):
        assess(MESSAGES, down)
    assert len(calls) == 1
