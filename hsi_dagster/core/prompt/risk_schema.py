"""The risk assessment the model returns: models, the JSON schema sent to llama.cpp, a lenient parser, repair.

- `RISK_JSON_SCHEMA` is flat (no $ref/definitions), bounds every string (maxLength) and array (maxItems) so a
  constrained reply cannot run past the output budget, and lists fields in the order the prompt describes them.
- `parse_assessment` accepts what small or reasoning models actually return: `<think>` blocks, prose or code
  fences around the object, a score as float or string, out-of-range scores (clamped), over-long text (cut), and
  invalid optional items (dropped, with a warning). The level is always DERIVED from the score (the derived level
  wins); a different level from the model is recorded as a disagreement. Missing required fields are an error,
  which triggers the one repair attempt (`repair_messages`).
- Two output schemas (ASSESSMENT_SCHEMA, `assessment_schema(name)`): `plain` (score, level, summary, reasoning,
  optional lists) and `rubric` (evidence before the verdict: `observations`, then the yes/no `rubric` answers of
  core/prompt/rubric.py, then the same fields). In the rubric schema the model's verdict score is the rubric score code
  derives from its answers (`RiskAssessment.verdict_score`), not the number it wrote.
- Bounded against loops: every string has a maxLength (llama.cpp enforces it in the grammar), the lists are short,
  and `cut_repetition` cuts a phrase repeated over and over (a looping model) down to one occurrence, with a
  warning. `schema_max_chars` is the longest reply a schema allows: the output budget holds it
  (tests/core/prompt/test_risk.py), so a loop ends with the grammar's closing brace, not at max_tokens.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hsi_dagster.core.prompt.rubric import RUBRIC_JSON_SCHEMA, RUBRIC_KEYS, rubric_score
from hsi_dagster.core.prompt.text import strip_think

RiskLevel = Literal["low", "medium", "high", "critical"]
RISK_LEVELS: tuple[str, ...] = ("low", "medium", "high", "critical")
LEVEL_BANDS: tuple[tuple[str, int, int], ...] = (
    ("low", 0, 29),
    ("medium", 30, 59),
    ("high", 60, 84),
    ("critical", 85, 100),
)

# Bounds of every field: a looping model fills a string up to its maxLength and no further (schema_max_chars).
SUMMARY_MAX = 160
REASONING_MAX = 400
TEXT_MAX = 100
NAME_MAX = 40
OBSERVATION_MAX = 100
MAX_FACTORS, MAX_ENTITIES, MAX_FLAGS, MAX_OBSERVATIONS = 3, 3, 2, 5
REPAIR_ECHO_MAX_CHARS = 2000

PLAIN, RUBRIC = "plain", "rubric"
ASSESSMENT_SCHEMA_NAMES: tuple[str, ...] = (PLAIN, RUBRIC)
# The ASSESSMENT_SCHEMA default: plain is the schema measured schema-valid on the holdout split (README "Evaluation");
# the rubric schema is unmeasured, and SmolLM2 gave no usable rubric reply for the demo's garage pair.
DEFAULT_ASSESSMENT_SCHEMA = PLAIN


def level_for_score(score: int) -> str:
    """low 0-29, medium 30-59, high 60-84, critical 85-100."""
    if isinstance(score, bool) or not isinstance(score, int) or not 0 <= score <= 100:
        raise ValueError(f"risk_score must be an integer 0-100, got {score!r}")
    for level, low, high in LEVEL_BANDS:
        if low <= score <= high:
            return level
    raise AssertionError("unreachable")


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class RiskFactor(_Model):
    factor_name: str = Field(max_length=NAME_MAX)
    contribution: int = Field(ge=-50, le=50)
    description: str = Field("", max_length=TEXT_MAX)


class Entity(_Model):
    type: Literal["person", "vehicle", "animal", "object"]
    description: str = Field(max_length=TEXT_MAX)
    threat_level: Literal["none", "low", "medium", "high"]


class Flag(_Model):
    type: str = Field(max_length=NAME_MAX)
    description: str = Field(max_length=TEXT_MAX)
    severity: Literal["warning", "alert", "critical"]


class ConfidenceFactors(_Model):
    detection_quality: Literal["high", "medium", "low"] | None = None
    weather_impact: Literal["none", "minor", "significant"] | None = None
    enrichment_coverage: Literal["full", "partial", "minimal"] | None = None


class RubricAnswers(_Model):
    unknown_person: bool
    tries_door_or_window: bool
    carries_tool_or_weapon: bool
    face_concealed: bool
    forced_entry_or_damage: bool
    violence: bool
    takes_property: bool
    loiters: bool


class RiskAssessment(_Model):
    # Rubric schema only (None in the plain one): evidence first, the model's own verdict after it.
    observations: list[str] | None = Field(None, max_length=MAX_OBSERVATIONS)
    rubric: RubricAnswers | None = None
    risk_score: int = Field(ge=0, le=100)
    risk_level: RiskLevel
    summary: str = Field(max_length=SUMMARY_MAX)
    reasoning: str = Field(max_length=REASONING_MAX)
    risk_factors: list[RiskFactor] = Field(default_factory=list, max_length=MAX_FACTORS)
    entities: list[Entity] = Field(default_factory=list, max_length=MAX_ENTITIES)
    flags: list[Flag] = Field(default_factory=list, max_length=MAX_FLAGS)
    recommended_action: str | None = Field(None, max_length=TEXT_MAX)
    confidence_factors: ConfidenceFactors | None = None

    @property
    def verdict_score(self) -> int:
        """The score that counts as the model's: the rubric score of its answers when it gave them (rubric schema),
        else the number it wrote."""
        return rubric_score(self.rubric.model_dump()) if self.rubric is not None else self.risk_score


def _str(max_length: int, **extra: Any) -> dict:
    return {"type": "string", "maxLength": max_length, **extra}


PLAIN_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "risk_score": {"type": "integer", "minimum": 0, "maximum": 100},
        "risk_level": {"type": "string", "enum": list(RISK_LEVELS)},
        "summary": _str(SUMMARY_MAX),
        "reasoning": _str(REASONING_MAX),
        "risk_factors": {
            "type": "array",
            "maxItems": MAX_FACTORS,
            "items": {
                "type": "object",
                "properties": {
                    "factor_name": _str(NAME_MAX),
                    "contribution": {"type": "integer", "minimum": -50, "maximum": 50},
                    "description": _str(TEXT_MAX),
                },
                "required": ["factor_name", "contribution", "description"],
                "additionalProperties": False,
            },
        },
        "entities": {
            "type": "array",
            "maxItems": MAX_ENTITIES,
            "items": {
                "type": "object",
                "properties": {
                    "type": {"type": "string", "enum": ["person", "vehicle", "animal", "object"]},
                    "description": _str(TEXT_MAX),
                    "threat_level": {"type": "string", "enum": ["none", "low", "medium", "high"]},
                },
                "required": ["type", "description", "threat_level"],
                "additionalProperties": False,
            },
        },
        "flags": {
            "type": "array",
            "maxItems": MAX_FLAGS,
            "items": {
                "type": "object",
                "properties": {
                    "type": _str(NAME_MAX),
                    "description": _str(TEXT_MAX),
                    "severity": {"type": "string", "enum": ["warning", "alert", "critical"]},
                },
                "required": ["type", "description", "severity"],
                "additionalProperties": False,
            },
        },
        "recommended_action": _str(TEXT_MAX),
        "confidence_factors": {
            "type": "object",
            "properties": {
                "detection_quality": {"type": "string", "enum": ["high", "medium", "low"]},
                "weather_impact": {"type": "string", "enum": ["none", "minor", "significant"]},
                "enrichment_coverage": {"type": "string", "enum": ["full", "partial", "minimal"]},
            },
            "additionalProperties": False,
        },
    },
    "required": ["risk_score", "risk_level", "summary", "reasoning"],
    "additionalProperties": False,
}
RISK_JSON_SCHEMA = PLAIN_JSON_SCHEMA  # the name older callers and tests use

RUBRIC_RISK_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "observations": {"type": "array", "maxItems": MAX_OBSERVATIONS, "items": _str(OBSERVATION_MAX)},
        "rubric": RUBRIC_JSON_SCHEMA,
        **PLAIN_JSON_SCHEMA["properties"],
    },
    "required": ["observations", "rubric", *PLAIN_JSON_SCHEMA["required"]],
    "additionalProperties": False,
}
_SCHEMAS = {PLAIN: PLAIN_JSON_SCHEMA, RUBRIC: RUBRIC_RISK_JSON_SCHEMA}


def assessment_schema(name: str) -> dict[str, Any]:
    """The JSON schema sent to the server for ASSESSMENT_SCHEMA=`name` (plain | rubric)."""
    try:
        return _SCHEMAS[name]
    except KeyError:
        raise ValueError(
            f"ASSESSMENT_SCHEMA={name!r}: accepted values are {', '.join(ASSESSMENT_SCHEMA_NAMES)}"
        ) from None


def schema_name_of(schema: dict[str, Any]) -> str:
    """plain or rubric: which of the assessment schemas `schema` is (by its fields)."""
    return RUBRIC if "rubric" in schema.get("properties", {}) else PLAIN


def schema_max_chars(schema: dict[str, Any]) -> int:
    """The longest compact JSON a schema allows (every string and list at its bound, optional fields present): an
    upper bound on what a looping model can make the grammar emit. Enum strings count at their longest value."""
    kind = schema.get("type")
    if "enum" in schema:
        return max(len(json.dumps(value)) for value in schema["enum"])
    if kind == "string":
        return 2 + 2 * int(schema["maxLength"])  # quotes; an escaped character takes two
    if kind == "integer":
        return max(len(str(schema.get("minimum", -(10**9)))), len(str(schema.get("maximum", 10**9))))
    if kind == "boolean":
        return len("false")
    if kind == "array":
        items = int(schema["maxItems"])
        return 2 + items * schema_max_chars(schema["items"]) + max(0, items - 1) * 2
    if kind == "object":
        properties = schema["properties"]
        fields = [len(json.dumps(key)) + 2 + schema_max_chars(sub) for key, sub in properties.items()]
        return 2 + sum(fields) + max(0, len(fields) - 1) * 2
    raise ValueError(f"schema_max_chars: no bound for {schema!r}")


_REPEAT = re.compile(r"(.{4,80}?)(?:\s*\1){2,}", re.DOTALL)


def cut_repetition(text: str) -> tuple[str, bool]:
    """A phrase repeated three or more times in a row (a looping model) is kept once, followed by "…"."""
    match = _REPEAT.search(text)
    if match is None:
        return text, False
    return (text[: match.start()] + match.group(1)).rstrip() + "…", True


@dataclass
class ParsedAssessment:
    assessment: RiskAssessment | None
    derived_level: str | None
    model_level: str | None
    level_disagrees: bool
    error: str | None
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.assessment is not None


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)


def extract_json_object(text: str) -> dict | None:
    """The first JSON object in `text` that has a risk_score (else the first object at all)."""
    candidates: list[str] = [text.strip()] + [m.group(1) for m in _FENCE.finditer(text)]
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except (json.JSONDecodeError, ValueError):
            continue
        if isinstance(value, dict):
            return value
    decoder = json.JSONDecoder()
    first: dict | None = None
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            if "risk_score" in value:
                return value
            first = first or value
    return first


def _to_score(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(round(value)) if value == value else None  # NaN is not a score
    if isinstance(value, str):
        match = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*(?:/\s*100)?\s*%?\s*", value)
        return int(round(float(match.group(1)))) if match else None
    return None


def _cut(value: Any, limit: int) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _optional_items(data: dict, key: str, model: type[BaseModel], limit: int, warnings: list[str]) -> list:
    raw = data.get(key)
    if raw is None:
        return []
    if not isinstance(raw, list):
        warnings.append(f"{key} is not a list; ignored")
        return []
    items = []
    for index, item in enumerate(raw[:limit]):
        if isinstance(item, dict):
            item = {
                k: (_cut(v, NAME_MAX if k in ("factor_name", "type") else TEXT_MAX) if isinstance(v, str) else v)
                for k, v in item.items()
            }
            if (
                key == "risk_factors"
                and isinstance(item.get("contribution"), (int, float))
                and not isinstance(item["contribution"], bool)
            ):
                item["contribution"] = max(-50, min(50, int(round(item["contribution"]))))
        try:
            items.append(model.model_validate(item))
        except ValidationError as exc:
            warnings.append(f"{key}[{index}] dropped: {exc.errors()[0]['msg']}")
    if len(raw) > limit:
        warnings.append(f"{key}: kept the first {limit} of {len(raw)}")
    return items


_YES_NO = {"yes": True, "true": True, "no": False, "false": False}


def _rubric(data: dict, warnings: list[str]) -> tuple[RubricAnswers | None, str | None]:
    """The rubric answers (booleans; "yes"/"no" accepted); an error names what is missing."""
    raw = data.get("rubric")
    if not isinstance(raw, dict):
        return None, f"rubric is missing or not an object: {raw!r}"[:200]
    answers: dict[str, bool] = {}
    missing = []
    for key in RUBRIC_KEYS:
        value = raw.get(key)
        if isinstance(value, str):
            value = _YES_NO.get(value.strip().lower(), value)
        if isinstance(value, bool):
            answers[key] = value
        else:
            missing.append(key)
    if missing:
        return None, f"rubric answer(s) missing or not yes/no: {', '.join(missing)}"
    return RubricAnswers(**answers), None


def _bounded_text(value: str, limit: int, name: str, warnings: list[str]) -> str:
    text, looped = cut_repetition(_cut(value, limit) or "")
    if looped:
        warnings.append(f"{name} repeats itself; cut to one occurrence")
    return text


def _observations(data: dict, warnings: list[str]) -> list[str]:
    raw = data.get("observations")
    if not isinstance(raw, list):
        warnings.append("observations is not a list; ignored")
        return []
    kept = [
        _bounded_text(item, OBSERVATION_MAX, f"observations[{index}]", warnings)
        for index, item in enumerate(raw[:MAX_OBSERVATIONS])
        if isinstance(item, str) and item.strip()
    ]
    if len(raw) > MAX_OBSERVATIONS:
        warnings.append(f"observations: kept the first {MAX_OBSERVATIONS} of {len(raw)}")
    return kept


def parse_assessment(text: str, schema: str = PLAIN) -> ParsedAssessment:
    """Lenient parse of a model reply under the `schema` (plain | rubric) it was asked for; `error` is set (and
    `assessment` None) when it cannot be used."""
    cleaned = strip_think(text or "")
    data = extract_json_object(cleaned)
    if data is None:
        return ParsedAssessment(None, None, None, False, "no JSON object found in the model output")
    warnings: list[str] = []
    raw_level = data.get("risk_level")
    model_level = raw_level.strip().lower() if isinstance(raw_level, str) else None
    score = _to_score(data.get("risk_score"))
    if score is None:
        return ParsedAssessment(
            None, None, model_level, False, f"risk_score is missing or not a number: {data.get('risk_score')!r}"
        )
    if not 0 <= score <= 100:
        warnings.append(f"risk_score {score} clamped to 0-100")
        score = max(0, min(100, score))
    derived = level_for_score(score)
    disagrees = model_level is not None and model_level != derived
    if disagrees:
        warnings.append(f"model said risk_level {model_level!r} but score {score} is {derived!r}; using {derived!r}")
    missing = [key for key in ("summary", "reasoning") if not isinstance(data.get(key), str) or not data[key].strip()]
    if missing:
        return ParsedAssessment(
            None, derived, model_level, disagrees, f"required field(s) missing or empty: {', '.join(missing)}", warnings
        )
    rubric, observations = None, None
    if schema == RUBRIC:
        rubric, rubric_error = _rubric(data, warnings)
        if rubric_error:
            return ParsedAssessment(None, derived, model_level, disagrees, rubric_error, warnings)
        observations = _observations(data, warnings)
    confidence = data.get("confidence_factors")
    confidence_model = None
    if isinstance(confidence, dict):
        try:
            confidence_model = ConfidenceFactors.model_validate(confidence)
        except ValidationError as exc:
            warnings.append(f"confidence_factors dropped: {exc.errors()[0]['msg']}")
    assessment = RiskAssessment(
        observations=observations,
        rubric=rubric,
        risk_score=score,
        risk_level=derived,  # type: ignore[arg-type]
        summary=_bounded_text(data["summary"], SUMMARY_MAX, "summary", warnings),
        reasoning=_bounded_text(data["reasoning"], REASONING_MAX, "reasoning", warnings),
        risk_factors=_optional_items(data, "risk_factors", RiskFactor, MAX_FACTORS, warnings),
        entities=_optional_items(data, "entities", Entity, MAX_ENTITIES, warnings),
        flags=_optional_items(data, "flags", Flag, MAX_FLAGS, warnings),
        recommended_action=_cut(data.get("recommended_action"), TEXT_MAX)
        if isinstance(data.get("recommended_action"), str)
        else None,
        confidence_factors=confidence_model,
    )
    return ParsedAssessment(assessment, derived, model_level, disagrees, None, warnings)


def repair_messages(messages: list[dict], bad_output: str, error: str, schema: str = PLAIN) -> list[dict]:
    """The single repair attempt: the original conversation (same cached prefix) + the bad reply + a fix request."""
    echoed = (bad_output or "")[:REPAIR_ECHO_MAX_CHARS]
    required = "risk_score (integer 0-100), risk_level, summary and reasoning are required"
    if schema == RUBRIC:
        required = "observations, rubric (every question answered true or false), " + required
    instruction = (
        f"Your previous reply could not be used: {error}. Reply again with ONLY one JSON object that matches the "
        f"schema in the instructions: {required}. No prose, no code fences."
    )
    return [*messages, {"role": "assistant", "content": echoed}, {"role": "user", "content": instruction}]
