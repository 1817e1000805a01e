"""The pipeline's asset checks. Each tests the value against something the code that produced it did not decide:

- `prompt_fits_budget` (budgeted_prompts, blocking): the messages AS READ BACK from DuckDB, re-encoded whole,
  scaled by the token ratio, fit the stored budget. The budgeting counted section by section and stopped cutting
  when its running sum fitted; this recount does not use that sum, so an undercount or a mangled row fails it.
- `stored_assessment_valid` (risk_assessments): the row AS READ BACK: the stored assessment JSON validates against
  the schema llama-server was given (plain or rubric, core/prompt/risk_schema.py; checked with jsonschema rather than
  the parser's pydantic models), its text agrees with the columns, the model_score is recomputed from the stored JSON
  (the rubric score of its answers, else its number), the stored score is max(model_score, floor_score) with the
  model's score capped at the top of the band `model_trust` levels above the floor's level (the trust the row says
  applied, 0-3; core/verdict/final.py), the level its band and `model_level` the band of the model's score; a
  `floor_only` row (no usable reply, the evidence floor decided) has the floor's score, the reply
  and the reason; an invalid output is stored with the reply and the reason.
- `model_level_matches_score` (risk_assessments, warning): the model's OWN risk_level, as it replied, against the
  band of its own number. The stored level is always derived from the stored score, so only the model's level can
  disagree: a model that contradicts itself is worth a look (prompt, model or calibration).
- `stored_level_matches_its_text` (risk_assessments, warning): the stored summary, reasoning and rubric answers,
  read with a short list of words for forced entry, a weapon or violence (and the rubric's forced-entry and violence
  answers), against the stored level: such a description stored "low" contradicts itself (the verdict's principle 4).
  It reads the text only, not the floor, the trust or the scores that set the level, so it catches what they miss.
- `prompt_within_budget` (risk_assessments, warning): llama-server's own count of the prompt (usage.prompt_tokens)
  against the budget: the cl100k estimate times PROMPT_TOKEN_RATIO must not have undercounted the served model.

Each is a function of plain values returning the check result, so a test can hand it a bad value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg
from jsonschema import Draft202012Validator

from hsi_dagster.core.prompt.risk_schema import (
    LEVEL_BANDS,
    PLAIN_JSON_SCHEMA,
    RISK_LEVELS,
    RUBRIC_RISK_JSON_SCHEMA,
    level_for_score,
)
from hsi_dagster.core.prompt.rubric import rubric_score
from hsi_dagster.core.prompt.tokens import TokenCounter
from hsi_dagster.core.verdict.final import FLOOR_ONLY, FLOOR_STANDS_ALONE
from hsi_dagster.core.verdict.trust import untrusted_note

PROMPT_FITS = "prompt_fits_budget"
STORED_VALID = "stored_assessment_valid"
MODEL_LEVEL = "model_level_matches_score"
SERVER_TOKENS = "prompt_within_budget"
TEXT_AGREES = "stored_level_matches_its_text"

MAX_PROBLEMS_SHOWN = 5
_PLAIN = Draft202012Validator(PLAIN_JSON_SCHEMA)
_RUBRIC = Draft202012Validator(RUBRIC_RISK_JSON_SCHEMA)


def prompt_fits_budget(
    messages: Sequence[dict], budget: int, token_ratio: float, counter: TokenCounter
) -> dg.AssetCheckResult:
    recount = counter.count_messages(messages)
    served = recount * token_ratio
    return dg.AssetCheckResult(
        check_name=PROMPT_FITS,
        passed=served <= budget,
        metadata={
            "recounted_tokens_cl100k": recount,
            "served_tokens_estimate": round(served),
            "budget": budget,
            "token_ratio": token_ratio,
        },
    )


def _score_problems(row: Mapping[str, Any], model_score: int | None) -> list[str]:
    """The stored score against max(model_score within its cap, floor_score), the level against the band of the
    stored score."""
    problems = []
    if row.get("model_score") != model_score:
        problems.append(f"model_score: column {row.get('model_score')!r} but the stored reply gives {model_score!r}")
    floor = row.get("floor_score")
    floor_score = floor if isinstance(floor, int) else 0
    floor_band = next(index for index, (_, low, high) in enumerate(LEVEL_BANDS) if low <= floor_score <= high)
    trust = row.get("model_trust")
    trust = 0 if trust is None else trust  # rows stored before migration 11: the old fixed cap of 0
    if not isinstance(trust, int) or not 0 <= trust <= 3:
        return [*problems, f"model_trust {trust!r} is not a trust 0-3"]
    cap = LEVEL_BANDS[min(floor_band + trust, len(LEVEL_BANDS) - 1)][2]
    expected = max(min(model_score or 0, cap), floor_score)
    score = row.get("risk_score")
    if score != expected:
        problems.append(
            f"risk_score {score!r} is not the verdict of model {model_score!r} (trust {trust}: capped at {cap}) and "
            f"floor {floor!r} = {expected}"
        )
    model_band = level_for_score(model_score) if isinstance(model_score, int) and 0 <= model_score <= 100 else None
    if "model_level" in row and row.get("model_level") != model_band and row.get("trust_source") is not None:
        problems.append(f"model_level {row.get('model_level')!r} is not the band of the model's score {model_score!r}")
    if isinstance(score, int) and 0 <= score <= 100 and level_for_score(score) != row.get("risk_level"):
        problems.append(f"risk_level {row.get('risk_level')!r} is not the band of score {score}")
    return problems


def _stored_problems(row: Mapping[str, Any] | None) -> list[str]:
    if row is None:
        return ["no row stored for the batch"]
    status = row.get("status")
    if status == "invalid_output":
        return (
            [] if row.get("raw_output") is not None and row.get("error") else ["invalid output without reply or reason"]
        )
    if status == FLOOR_ONLY:
        problems = (
            [] if row.get("raw_output") is not None and row.get("error") else ["floor_only without reply or reason"]
        )
        if not isinstance(row.get("floor_score"), int) or row["floor_score"] < FLOOR_STANDS_ALONE:
            problems.append(f"floor_only with floor_score {row.get('floor_score')!r} < {FLOOR_STANDS_ALONE}")
        return problems + _score_problems(row, None)
    if status != "ok":
        return [f"status {status!r} is not a stored assessment"]
    try:
        assessment = json.loads(row["assessment"]) if isinstance(row.get("assessment"), str) else row.get("assessment")
    except json.JSONDecodeError as exc:
        return [f"assessment is not JSON: {exc}"]
    if not isinstance(assessment, dict):
        return ["assessment is not an object"]
    validator = _RUBRIC if "rubric" in assessment else _PLAIN
    problems = [
        f"assessment{''.join(f'[{p!r}]' for p in error.absolute_path)}: {error.message}"
        for error in sorted(validator.iter_errors(assessment), key=lambda e: list(map(str, e.absolute_path)))
    ]
    for column in ("summary", "reasoning"):
        if assessment.get(column) != row.get(column):
            problems.append(f"{column}: column {row.get(column)!r} but assessment {assessment.get(column)!r}")
    rubric = assessment.get("rubric")
    own = assessment.get("risk_score")
    model_score = rubric_score(rubric) if isinstance(rubric, dict) else own if isinstance(own, int) else None
    return problems + _score_problems(row, model_score)


def stored_assessment_valid(row: Mapping[str, Any] | None) -> dg.AssetCheckResult:
    problems = _stored_problems(row)
    return dg.AssetCheckResult(
        check_name=STORED_VALID,
        passed=not problems,
        metadata={
            "status": str((row or {}).get("status")),
            "problems": "; ".join(problems[:MAX_PROBLEMS_SHOWN]) or "none",
        },
    )


def _own_score(row: Mapping[str, Any]) -> Any:
    """The number the model wrote (in the stored reply), not the stored verdict score."""
    try:
        assessment = json.loads(row["assessment"]) if isinstance(row.get("assessment"), str) else row.get("assessment")
    except json.JSONDecodeError:
        return None
    return assessment.get("risk_score") if isinstance(assessment, dict) else None


def model_level_matches_score(row: Mapping[str, Any] | None) -> dg.AssetCheckResult:
    row = row or {}
    score, model_level = _own_score(row), row.get("model_risk_level")
    if row.get("status") != "ok" or not isinstance(score, int) or not 0 <= score <= 100:
        passed, band = False, None  # no usable reply: nothing of the model's to agree
    else:
        band = level_for_score(score)
        passed = model_level == band
    return dg.AssetCheckResult(
        check_name=MODEL_LEVEL,
        passed=passed,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "model_risk_level": str(model_level) if model_level in RISK_LEVELS else f"{model_level!r} (not a level)",
            "model_own_score": score if isinstance(score, int) else -1,
            "band_of_score": band or "none",
        },
    )


def server_prompt_tokens_within_budget(row: Mapping[str, Any] | None) -> dg.AssetCheckResult:
    row = row or {}
    prompt_tokens, budget = row.get("prompt_tokens"), row.get("context_budget")
    passed = isinstance(prompt_tokens, int) and isinstance(budget, int) and prompt_tokens <= budget
    return dg.AssetCheckResult(
        check_name=SERVER_TOKENS,
        passed=passed,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={"server_prompt_tokens": prompt_tokens or 0, "budget": budget or 0},
    )


# What a household reads as forced entry, a weapon or violence. Deliberately a separate, small vocabulary: this check
# must not share the rules or the rubric table that produced the level. A negation just before ("no weapon", "without
# forcing") does not count.
_CONTRADICTION_WORDS = {
    "forced entry": r"forc(?:e|ed|es|ing)\b(?! *(?:field|majeure))|pr(?:y|ies|ied|ying)\b|crowbar|jimm(?:y|ied|ying)|"
    r"break(?:s|ing)? (?:in|into|the)\b|broke (?:in|into)|smash(?:es|ed|ing)?\b|kick(?:s|ed|ing)? (?:in|down)\b",
    "weapon": r"weapon|gun\b|pistol|rifle|firearm|knife|knives|machete|armed\b",
    "violence": r"violen(?:ce|t)|fight(?:s|ing)?\b|punch(?:es|ed|ing)?\b|assault|attack(?:s|ed|ing)?\b|"
    r"stab(?:s|bed|bing)?\b|hitting\b|beat(?:s|ing)? (?:up|a|the|him|her|someone)",
}
_NEGATION = re.compile(r"\b(?:no|not|nor|without|never|nothing|none)\b(?:\W+\w+){0,2}\W*$", re.IGNORECASE)
_RUBRIC_HOSTILE = {"forced_entry_or_damage": "forced entry", "violence": "violence"}


def text_describes(text: str) -> list[str]:
    """Which of forced entry, a weapon or violence `text` describes (not negated just before)."""
    found = []
    for name, pattern in _CONTRADICTION_WORDS.items():
        for match in re.finditer(pattern, text, re.IGNORECASE):
            if not _NEGATION.search(text[max(0, match.start() - 40) : match.start()]):
                found.append(name)
                break
    return found


def _described(row: Mapping[str, Any]) -> list[str]:
    text = " ".join(str(row.get(column) or "") for column in ("summary", "reasoning"))
    found = text_describes(text)
    try:
        assessment = json.loads(row["assessment"]) if isinstance(row.get("assessment"), str) else row.get("assessment")
    except json.JSONDecodeError:
        assessment = None
    rubric = assessment.get("rubric") if isinstance(assessment, dict) else None
    if isinstance(rubric, dict):
        found += [f"rubric {key}: yes" for key in _RUBRIC_HOSTILE if rubric.get(key) is True]
    return found


def stored_level_matches_its_text(row: Mapping[str, Any] | None) -> dg.AssetCheckResult:
    row = row or {}
    level = row.get("risk_level")
    described = _described(row) if row.get("status") in ("ok", FLOOR_ONLY) else []
    contradicts = level == "low" and bool(described)
    return dg.AssetCheckResult(
        check_name=TEXT_AGREES,
        passed=not contradicts,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "risk_level": str(level),
            "described": ", ".join(described) or "none",
            "model_note": untrusted_note(row.get("model_level"), level, row.get("trust_reason")) or "none",
        },
    )
