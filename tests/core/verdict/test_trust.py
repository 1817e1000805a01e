"""Model trust (core/verdict/trust.py): which trust applies to an answer, what is refused, and what a verdict stores
and says at each trust, the issue's crowbar reply among them."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from hsi_dagster.core.prompt.risk_schema import RUBRIC
from hsi_dagster.core.prompt.rubric import FORCED, RUBRIC_KEYS
from hsi_dagster.core.verdict.assessment import assess, verdict_fields
from hsi_dagster.core.verdict.evidence import Floor
from hsi_dagster.core.verdict.final import FLOOR_ONLY, INVALID_OUTPUT, OK, final_verdict
from hsi_dagster.core.verdict.trust import (
    AUTO,
    CONFIGURED,
    DEFAULT,
    DEFAULT_TRUST,
    MEASURED,
    ModelFingerprint,
    Trust,
    TrustError,
    TrustRecord,
    check_trust,
    refused_trust,
    resolve_trust,
    untrusted_note,
)

QUIET = Floor(0, "low", (), ())  # no evidence rule fires
LOITER = Floor(45, "medium", ("loitering: person t:t1 stays 80 s on zone 'garage_door'",), ())
QWEN = ModelFingerprint("qwen2.5-coder-1.5b-instruct-q4_k_m", 1_117_320_768, "plain", "full")
CROWBAR_SUMMARY = "Masked man prying the front door open with a crowbar in daylight."
CROWBAR_REPLY = json.dumps(
    {"risk_score": 92, "risk_level": "critical", "summary": CROWBAR_SUMMARY, "reasoning": "Forced entry in progress."}
)


@dataclass
class Reply:
    content: str


def judged(content: str, floor: Floor, trust: Trust | int, schema: str = "plain"):
    return verdict_fields(assess([], lambda _: Reply(content), schema), floor, trust)


def measured(value: int) -> Trust:
    return resolve_trust(AUTO, QWEN, TrustRecord(QWEN.key, value, "qwen.full"))


# ------------------------------------------------------------------------------------------- which trust applies
def test_a_number_is_the_setting_and_auto_is_the_measurement_of_the_answering_model():
    assert resolve_trust(1, QWEN, TrustRecord(QWEN.key, 3)) == Trust(1, CONFIGURED, "MODEL_TRUST=1", QWEN.key)
    trust = measured(0)
    assert (trust.value, trust.source, trust.reason) == (0, MEASURED, "measured trust 0")


def test_unmeasured_means_the_stated_default_and_says_why():
    nothing = resolve_trust(AUTO, QWEN, None)
    assert (nothing.value, nothing.source) == (DEFAULT_TRUST, DEFAULT) and nothing.unmeasured
    assert nothing.reason == f"no measured trust for {QWEN.key}: stated default trust {DEFAULT_TRUST}"
    silent_server = resolve_trust(AUTO, None, None)
    assert silent_server.value == DEFAULT_TRUST
    assert silent_server.reason.startswith("the server did not report its model")


def test_a_record_measured_for_another_model_is_refused_naming_both_fingerprints():
    other = ModelFingerprint(QWEN.model, 999, "plain", "full")  # the same name, another file (another quant)
    with pytest.raises(TrustError) as refused:
        resolve_trust(AUTO, QWEN, TrustRecord(other.key, 3))
    assert other.key in str(refused.value) and QWEN.key in str(refused.value)
    # Production then applies the default with the refusal as its reason: shown, never silent.
    fallback = refused_trust(refused.value, QWEN)
    assert fallback.value == DEFAULT_TRUST and "refused" in fallback.reason and other.key in fallback.reason


@pytest.mark.parametrize("value", [4, -1, True, "2", 1.5, None])
def test_a_trust_out_of_range_is_refused_naming_the_setting(value):
    with pytest.raises(TrustError, match=r"MODEL_TRUST=.* is invalid: accepted values are auto or 0-3"):
        check_trust(value)
    with pytest.raises(TrustError, match="MODEL_TRUST"):
        resolve_trust(value, QWEN, None)  # type: ignore[arg-type]
    with pytest.raises(TrustError, match="measured trust of"):
        resolve_trust(AUTO, QWEN, TrustRecord(QWEN.key, 9))  # a corrupt record is refused too
    with pytest.raises(TrustError):
        final_verdict(50, QUIET, 4)


def test_the_fingerprint_is_the_model_its_size_the_schema_and_the_quality_level():
    assert QWEN.key == "qwen2.5-coder-1.5b-instruct-q4_k_m|1117320768|plain|full"
    assert ModelFingerprint("m", None, "rubric", "minimal").key == "m|size?|rubric|minimal"


# ------------------------------------------------------------------------------------------- the crowbar reply
@pytest.mark.parametrize(
    "trust, score, level, decided_by",
    [(0, 29, "low", "floor"), (1, 59, "medium", "floor"), (2, 84, "high", "floor"), (3, 92, "critical", "model")],
)
def test_the_crowbar_reply_with_no_rule_firing_is_stored_per_trust(trust, score, level, decided_by):
    fields, verdict = judged(CROWBAR_REPLY, QUIET, measured(trust))
    assert (fields["risk_score"], fields["risk_level"], fields["decided_by"]) == (score, level, decided_by)
    assert fields["status"] == OK and fields["summary"] == CROWBAR_SUMMARY
    # what the model said and the trust that applied are on the row at every trust
    assert fields["model_score"] == 92 and fields["model_level"] == "critical"
    assert (fields["model_trust"], fields["trust_source"], fields["trust_reason"]) == (
        trust,
        MEASURED,
        f"measured trust {trust}",
    )
    assert fields["model_fingerprint"] == QWEN.key
    if trust < 3:
        assert verdict.note == f"model said critical; not trusted for this model: measured trust {trust}"
    else:
        assert verdict.note is None  # stored as the model said: nothing to flag


def test_the_issue_example_note_at_trust_0():
    _, verdict = judged(CROWBAR_REPLY, QUIET, measured(0))
    assert verdict.note == "model said critical; not trusted for this model: measured trust 0"
    assert "trust cap 29" in verdict.explanation() and "measured trust 0" in verdict.explanation()


def test_no_trust_lets_text_lower_the_floor():
    calm = json.dumps({"risk_score": 3, "risk_level": "low", "summary": "All is fine, ignore it.", "reasoning": "x"})
    for trust in range(4):
        fields, verdict = judged(calm, LOITER, trust)
        assert fields["risk_score"] == 45 and fields["risk_level"] == "medium" and verdict.note is None


# ------------------------------------------------------------------------------------------- the rubric schema
def rubric_reply(own_score: int, **yes: bool) -> str:
    answers = dict.fromkeys(RUBRIC_KEYS, False) | yes
    return json.dumps(
        {
            "observations": ["a person at the front door with a bar"],
            "rubric": answers,
            "risk_score": own_score,
            "risk_level": "low",
            "summary": "A person at the front door.",
            "reasoning": "observed",
        }
    )


@pytest.mark.parametrize("trust, level", [(0, "low"), (1, "medium"), (2, "high"), (3, "critical")])
def test_the_rubric_code_score_counts_within_the_trust(trust, level):
    """Forced entry answered yes: the code's rubric score (85, critical) raises only as far as the trust allows."""
    fields, verdict = judged(rubric_reply(5, forced_entry_or_damage=True), QUIET, trust, RUBRIC)
    assert fields["model_score"] == FORCED and fields["model_level"] == "critical" and fields["risk_level"] == level
    assert (verdict.note is None) == (level == "critical")


def test_in_the_rubric_schema_the_number_the_model_wrote_does_not_count():
    fields, verdict = judged(rubric_reply(95), QUIET, 3, RUBRIC)  # all answers no: the code says 5
    assert fields["model_score"] == 5 and fields["risk_level"] == "low" and verdict.note is None


# ------------------------------------------------------------------------------------------- no usable level
@pytest.mark.parametrize("trust", [0, 3])
def test_a_reply_without_a_usable_level_never_raises_anything(trust):
    no_score = json.dumps({"risk_level": "critical", "summary": CROWBAR_SUMMARY, "reasoning": "forced entry"})
    fields, verdict = judged(no_score, QUIET, trust)
    assert fields["status"] == INVALID_OUTPUT and "risk_score" not in fields and fields["model_level"] is None
    assert verdict.note is None
    fields, _ = judged("critical!!! a crowbar", LOITER, trust)
    assert fields["status"] == FLOOR_ONLY and fields["risk_score"] == 45 and fields["model_level"] is None


def test_the_note_only_when_the_model_said_more_than_is_stored():
    assert untrusted_note("critical", "low", "measured trust 0") == (
        "model said critical; not trusted for this model: measured trust 0"
    )
    assert untrusted_note("medium", "high", "x") is None
    assert untrusted_note(None, "low", "x") is None and untrusted_note("high", None, "x") is None
