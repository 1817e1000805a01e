"""Each asset check passes on a real value and fails on a bad one (the checks take plain values, as the assets
hand them what they read back from DuckDB)."""

from __future__ import annotations

import json
import random

import dagster as dg
import pytest

from hsi_dagster.assets.checks import (
    model_level_matches_score,
    prompt_fits_budget,
    server_prompt_tokens_within_budget,
    stored_assessment_valid,
    stored_level_matches_its_text,
)
from hsi_dagster.core.context.enrichment import build_context
from hsi_dagster.core.prompt.budget import fit_to_budget
from hsi_dagster.core.prompt.messages import build_sections
from hsi_dagster.core.prompt.rubric import RUBRIC_KEYS
from hsi_dagster.core.prompt.slot_budget import choose_budget
from hsi_dagster.core.prompt.tokens import TokenCounter
from hsi_dagster.core.verdict.assessment import assess, verdict_fields
from hsi_dagster.core.verdict.evidence import Floor
from hsi_dagster.synthetic.batches import synthetic_batch

RATIO = 1.22
REPLY = {"risk_score": 72, "risk_level": "high", "summary": "Someone tries car doors.", "reasoning": "Observed..."}


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter()


@pytest.fixture(scope="module")
def fitted(counter):
    batch, detections = synthetic_batch(random.Random(3), camera_id="driveway", n_detections=40)
    context = build_context(batch, detections, quality_level="full", clip_noise_threshold=0.2)
    choice = choose_budget(
        4_096, configured_slot_context=0, max_output_tokens=512, safety_margin=256, token_ratio=RATIO
    )
    return fit_to_budget(build_sections(context), "", choice.estimate_budget, counter), choice


class Reply:
    def __init__(self, content: str):
        self.content = content


TRIES_DOORS = Floor(60, "high", ("probing: action.label 'trying door handles'",), ())
WEAPON = Floor(90, "critical", ("weapon: detections.label 'knife' on 2 detections -> 90 critical",), ())


QUIET = Floor(0, "low", (), ())
CROWBAR = {
    "risk_score": 92,
    "risk_level": "critical",
    "summary": "Masked man prying the front door open with a crowbar in daylight.",
    "reasoning": "Forced entry in progress.",
}


def stored_row(reply: dict | str, floor: Floor = TRIES_DOORS, schema: str = "plain", trust: int = 0, **columns) -> dict:
    """A risk_assessments row as it reads back from DuckDB (the JSON columns as text)."""
    content = reply if isinstance(reply, str) else json.dumps(reply)
    fields, _ = verdict_fields(assess([], lambda _: Reply(content), schema), floor, trust)
    row = {**fields, "prompt_tokens": 900, "context_budget": 3_300}
    for column in ("assessment", "floor_reasons", "floor_ignored"):
        if row.get(column) is not None:
            row[column] = json.dumps(row[column])
    row.update(columns)
    return row


def test_prompt_fits_budget_passes_on_the_fitted_prompt_and_fails_when_the_stored_messages_grew(fitted, counter):
    prompt, choice = fitted
    good = prompt_fits_budget(prompt.messages, choice.budget, RATIO, counter)
    assert good.passed and good.metadata["recounted_tokens_cl100k"].value == prompt.tokens_after
    grown = [prompt.messages[0], {"role": "user", "content": prompt.messages[1]["content"] * 3}]
    bad = prompt_fits_budget(grown, choice.budget, RATIO, counter)
    assert not bad.passed and bad.metadata["served_tokens_estimate"].value > choice.budget


def test_prompt_fits_budget_fails_when_the_ratio_says_the_served_model_needs_more(fitted, counter):
    prompt, choice = fitted
    assert not prompt_fits_budget(prompt.messages, choice.budget, RATIO * 2, counter).passed


def test_stored_assessment_valid_passes_on_a_parsed_reply():
    result = stored_assessment_valid(stored_row(REPLY))
    assert result.passed and result.metadata["problems"].value == "none"


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"assessment": json.dumps({**REPLY, "risk_score": 150})}, "150 is greater than the maximum of 100"),
        ({"assessment": json.dumps({**REPLY, "mood": "tense"})}, "Additional properties are not allowed"),
        ({"assessment": '{"risk_score": 72'}, "not JSON"),
        ({"risk_score": 40}, "risk_score 40 is not the verdict of model 72 (trust 0: capped at 84) and floor 60 = 72"),
        ({"risk_level": "low"}, "risk_level 'low' is not the band of score 72"),
        ({"model_score": 10}, "model_score: column 10 but the stored reply gives 72"),
        (
            {"floor_score": 90},
            "risk_score 72 is not the verdict of model 72 (trust 0: capped at 100) and floor 90 = 90",
        ),
        ({"model_trust": 7}, "model_trust 7 is not a trust 0-3"),
        ({"model_level": "low"}, "model_level 'low' is not the band of the model's score 72"),
        ({"summary": None}, "summary: column None"),
        ({"status": "llm_rejected"}, "not a stored assessment"),
    ],
)
def test_stored_assessment_valid_fails_on_a_bad_row(change, problem):
    result = stored_assessment_valid(stored_row(REPLY, **change))
    assert not result.passed and problem in result.metadata["problems"].value


def test_stored_assessment_valid_fails_when_the_stored_level_is_not_the_band_of_the_score():
    row = stored_row(REPLY, risk_level="low", assessment=json.dumps({**REPLY, "risk_level": "low"}))
    result = stored_assessment_valid(row)
    assert not result.passed and "not the band of score 72" in result.metadata["problems"].value


def test_stored_assessment_valid_passes_on_a_floor_raised_verdict_and_a_rubric_reply():
    raised = stored_row(REPLY, WEAPON)
    assert raised["risk_score"] == 90 and raised["model_score"] == 72 and raised["decided_by"] == "floor"
    assert stored_assessment_valid(raised).passed
    rubric = {"observations": ["a person at the car"], "rubric": {k: k == "violence" for k in RUBRIC_KEYS}, **REPLY}
    row = stored_row(rubric, WEAPON, schema="rubric")
    assert row["model_score"] == row["risk_score"] == 90  # the rubric's score, not the model's 72
    assert stored_assessment_valid(row).passed
    assert "model_score: column 72" in stored_assessment_valid({**row, "model_score": 72}).metadata["problems"].value


def test_stored_assessment_valid_on_a_floor_only_row():
    row = stored_row("I cannot do that", WEAPON)
    assert row["status"] == "floor_only" and row["risk_score"] == 90 and row["model_score"] is None
    assert stored_assessment_valid(row).passed
    assert not stored_assessment_valid({**row, "risk_score": 70}).passed
    assert not stored_assessment_valid({**row, "raw_output": None}).passed


def test_stored_assessment_valid_on_an_invalid_output_and_on_no_row():
    invalid = {"status": "invalid_output", "raw_output": "I cannot", "error": "no JSON object found"}
    assert stored_assessment_valid(invalid).passed
    assert not stored_assessment_valid({**invalid, "error": None}).passed
    assert not stored_assessment_valid(None).passed


def test_model_level_matches_score_fails_when_the_model_contradicts_its_own_score():
    assert model_level_matches_score(stored_row(REPLY)).passed
    contradicts = model_level_matches_score(stored_row({**REPLY, "risk_level": "low"}))
    assert not contradicts.passed and contradicts.severity == dg.AssetCheckSeverity.WARN
    assert contradicts.metadata["model_risk_level"].value == "low"
    assert contradicts.metadata["band_of_score"].value == "high"
    assert not model_level_matches_score({"status": "invalid_output"}).passed


def test_server_prompt_tokens_within_budget_fails_when_the_server_counted_more():
    assert server_prompt_tokens_within_budget(stored_row(REPLY, prompt_tokens=3_300)).passed
    over = server_prompt_tokens_within_budget(stored_row(REPLY, prompt_tokens=3_301))
    assert not over.passed and over.metadata["server_prompt_tokens"].value == 3_301
    assert not server_prompt_tokens_within_budget(stored_row(REPLY, prompt_tokens=None)).passed


@pytest.mark.parametrize("trust, score", [(0, 29), (1, 59), (3, 92)])
def test_stored_assessment_valid_recomputes_the_verdict_within_the_trust_the_row_says_applied(trust, score):
    row = stored_row(CROWBAR, QUIET, trust=trust)
    assert row["risk_score"] == score and stored_assessment_valid(row).passed
    lied = stored_assessment_valid({**row, "model_trust": 3 if trust != 3 else 0})  # a trust the score did not get
    assert not lied.passed and "is not the verdict of model 92" in lied.metadata["problems"].value


def test_the_text_check_warns_on_a_forced_entry_summary_stored_low_and_shows_what_the_model_said():
    """The issue's row: a crowbar at the front door, no rule firing, trust 0: stored low. Flagged, with the note."""
    row = stored_row(CROWBAR, QUIET, trust=0)
    assert row["risk_level"] == "low" and stored_assessment_valid(row).passed  # consistent arithmetic...
    result = stored_level_matches_its_text(row)  # ...but the row contradicts its own text
    assert not result.passed and result.severity == dg.AssetCheckSeverity.WARN
    assert result.metadata["described"].value == "forced entry"
    assert result.metadata["model_note"].value == "model said critical; not trusted for this model: trust 0"
    assert stored_level_matches_its_text(stored_row(CROWBAR, QUIET, trust=3)).passed  # stored critical: agrees


@pytest.mark.parametrize(
    "summary, described",
    [
        ("A man with a knife at the gate.", "weapon"),
        ("Two people fighting on the driveway.", "violence"),
        ("Someone smashing the car window.", "forced entry"),
    ],
)
def test_the_text_check_reads_weapons_violence_and_forcing_whoever_set_the_level(summary, described):
    # A floor_only-like inconsistency injected into the stored row: the check reads the text, not the scores.
    row = {**stored_row(REPLY, QUIET), "summary": summary, "risk_level": "low", "risk_score": 20}
    result = stored_level_matches_its_text(row)
    assert not result.passed and described in result.metadata["described"].value
    assert stored_level_matches_its_text({**row, "risk_level": "high"}).passed


def test_the_text_check_passes_on_harmless_or_negated_text_and_reads_the_rubric_answers():
    calm = {**REPLY, "risk_score": 8, "risk_level": "low", "summary": "A courier leaves a parcel; no weapon seen."}
    calm["reasoning"] = "No signs of forced entry."
    assert stored_level_matches_its_text(stored_row(calm, QUIET)).passed
    answers = {k: k == "violence" for k in RUBRIC_KEYS}
    rubric = {"observations": ["two people"], "rubric": answers, **calm}
    row = stored_row(rubric, QUIET, schema="rubric", trust=0)  # the code's score says critical; trust 0 stores low
    assert row["risk_level"] == "low"
    result = stored_level_matches_its_text(row)
    assert not result.passed and "rubric violence: yes" in result.metadata["described"].value
    assert stored_level_matches_its_text(None).passed  # no row: nothing to contradict
