"""The stored verdict: max(model score, floor) within the model's trust, who decided, the floor_only case, and
evidence alerts only raise."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from hsi_dagster.core.verdict.assessment import assess, verdict_fields
from hsi_dagster.core.verdict.evidence import Floor
from hsi_dagster.core.verdict.final import (
    FLOOR,
    FLOOR_ONLY,
    INVALID_OUTPUT,
    MODEL,
    OK,
    final_verdict,
    raised_by_evidence_alerts,
)

REPLY = {
    "risk_score": 8,
    "risk_level": "low",
    "summary": "Routine.",
    "reasoning": "Observed a person. Inferred: routine.",
}
CROWBAR = Floor(
    90, "critical", ("forcing: action.label 'prying' on 3 frames of track t1 at entry zone 'back_door'",), ()
)
LOITER = Floor(
    45,
    "medium",
    ("loitering: person t:t1 stays 80 s on zone 'garage_door'",),
    ("clothing.suspicious of track t1: expected true/false, got 'yes'; ignored",),
)
QUIET = Floor(0, "low", (), ())


@dataclass
class Reply:
    content: str


def _judged(content: str, floor: Floor) -> tuple[dict, object]:
    return verdict_fields(assess([], lambda _: Reply(content)), floor, 0)


@pytest.mark.parametrize(
    "model, floor, score, level, decided_by",
    [
        (8, CROWBAR, 90, "critical", FLOOR),  # the crowbar "8 ... Inferred: routine" is raised
        (95, CROWBAR, 95, "critical", MODEL),  # the floor never lowers
        (90, CROWBAR, 90, "critical", MODEL),  # a tie: the model's score stands
        (20, QUIET, 20, "low", MODEL),
        (0, LOITER, 45, "medium", FLOOR),
    ],
)
def test_the_stored_score_is_the_higher_and_the_level_its_band(model, floor, score, level, decided_by):
    verdict = final_verdict(model, floor, 0)  # every case within the floor's band: the same at any trust
    assert (verdict.score, verdict.level, verdict.decided_by, verdict.status) == (score, level, decided_by, OK)
    assert verdict.model_score == model and verdict.floor_score == floor.score
    assert verdict.floor_reasons == floor.reasons


@pytest.mark.parametrize(
    "model, floor, trust, score, level, decided_by",
    [
        (93, Floor(70, "high", ("x",), ()), 0, 84, "high", FLOOR),  # the demo's garage pair: 93 and 8 -> both high
        (8, Floor(70, "high", ("x",), ()), 0, 70, "high", FLOOR),
        (75, Floor(70, "high", ("x",), ()), 0, 75, "high", MODEL),  # within the evidence's band the model places it
        (93, QUIET, 0, 29, "low", FLOOR),  # trust 0, no structured evidence: the model cannot make it an alert
        (93, QUIET, 1, 59, "medium", FLOOR),  # one level allowed: medium at most
        (93, LOITER, 1, 84, "high", FLOOR),
        (93, QUIET, 2, 84, "high", FLOOR),  # trust 2 (the unmeasured default): an alert, not critical
        (93, QUIET, 3, 93, "critical", MODEL),  # trust 3: the model alerts on its own
        (8, CROWBAR, 3, 90, "critical", FLOOR),  # no trust lowers the floor
    ],
)
def test_the_model_takes_a_verdict_at_most_trust_levels_above_the_evidence(
    model, floor, trust, score, level, decided_by
):
    verdict = final_verdict(model, floor, trust)
    assert (verdict.score, verdict.level, verdict.decided_by, verdict.model_score) == (
        score,
        level,
        decided_by,
        model,
    )


@pytest.mark.parametrize("trust", [0, 3])
def test_no_model_output_is_the_floors_verdict_from_medium_on_and_no_verdict_below(trust):
    """A reply without a usable level never raises anything, at any trust."""
    assert final_verdict(None, CROWBAR, trust).status == FLOOR_ONLY and final_verdict(None, CROWBAR, trust).score == 90
    assert final_verdict(None, LOITER, trust).status == FLOOR_ONLY and final_verdict(None, LOITER, trust).score == 45
    assert final_verdict(None, Floor(29, "low", ("x",), ()), trust).status == INVALID_OUTPUT
    quiet = final_verdict(None, QUIET, trust)
    assert not quiet.stands and "risk_score" not in quiet.columns() and quiet.note is None
    with pytest.raises(ValueError, match="model_score"):
        final_verdict(101, QUIET, trust)


def test_verdict_fields_keep_the_models_figures_beside_the_verdict():
    fields, verdict = _judged(json.dumps(REPLY), CROWBAR)
    assert fields["status"] == OK and fields["risk_score"] == 90 and fields["risk_level"] == "critical"
    assert (
        fields["model_score"] == 8 and fields["model_risk_level"] == "low" and fields["assessment"]["risk_score"] == 8
    )
    assert fields["floor_score"] == 90 and fields["floor_reasons"] == list(CROWBAR.reasons)
    assert fields["decided_by"] == "floor" and fields["summary"] == "Routine."
    assert "evidence floor 90 (model said 8): forcing" in verdict.explanation()


def test_a_garbage_reply_with_a_floor_is_stored_as_the_floors_verdict_with_the_reply_and_the_reason():
    fields, verdict = _judged("I cannot help with that.", LOITER)
    assert fields["status"] == FLOOR_ONLY and fields["risk_score"] == 45 and fields["risk_level"] == "medium"
    assert fields["model_score"] is None and fields["raw_output"] == "I cannot help with that."
    assert "no JSON object" in fields["error"] and fields["summary"].startswith("Evidence rules (medium")
    assert "loitering" in fields["reasoning"] and "caption" not in fields["summary"]
    assert fields["floor_ignored"] == list(LOITER.ignored)  # malformed enrichment is named, not lost
    fields, _ = _judged("I cannot help with that.", QUIET)
    assert fields["status"] == INVALID_OUTPUT and "risk_score" not in fields


def test_an_evidence_alert_already_sent_raises_the_batch_floor_and_never_lowers_it():
    alert = {"alert_key": "garage:t1:2948", "risk_score": 90, "risk_level": "critical", "reasons": ["weapon: knife"]}
    raised = raised_by_evidence_alerts(LOITER, [alert])
    assert raised.score == 90 and raised.level == "critical" and raised.reasons[0] == LOITER.reasons[0]
    assert "evidence-only alert garage:t1:2948 (critical 90): weapon: knife" in raised.reasons[-1]
    assert raised_by_evidence_alerts(CROWBAR, [{**alert, "risk_score": 70, "risk_level": "high"}]) == CROWBAR
    assert raised_by_evidence_alerts(CROWBAR, []) == CROWBAR


def test_the_explanation_says_when_the_trust_capped_the_model():
    assert final_verdict(93, QUIET, 0).explanation() == (
        "trust cap 29 (model said 93; evidence floor 0 + trust 0 allow no higher level)"
    )
    assert final_verdict(8, CROWBAR, 0).explanation().startswith("evidence floor 90 (model said 8): forcing")
