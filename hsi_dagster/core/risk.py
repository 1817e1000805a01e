"""The risk assessment the model returns: models, the JSON schema sent to llama.cpp, a lenient parser, repair.

- `RISK_JSON_SCHEMA` is flat (no $ref/definitions), bounds every string (maxLength) and array (maxItems) so a
  constrained reply cannot run past the output budget, and lists fields in the order the prompt describes them.
- `parse_assessment` accepts what small or reasoning models actually return: `<think>` blocks, prose or code
  fences around the object, a score as float or string, out-of-range scores (clamped), over-long text (cut), and
  invalid optional items (dropped, with a warning). The level is always DERIVED from the score (the derived level
  wins); a different level from the model is recorded as a disagreement. Missing required fields are an error,
  which triggers the one repair attempt (`repair_messages`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hsi_dagster.core.text import strip_think

RiskLevel = Literal["low", "medium", "high", "critical"]
RISK_LEVELS: tuple[str, ...] = ("low", "medium", "high", "critical")
LEVEL_BANDS: tuple[tuple[str, int, int], ...] = (
    ("low", 0, 29),
    ("medium", 30, 59),
    ("high", 60, 84),
    ("critical", 85, 100),
)

SUMMARY_MAX = 200
REASONING_MAX = 800
TEXT_MAX = 200
NAME_MAX = 60
MAX_FACTORS, MAX_ENTITIES, MAX_FLAGS = 6, 8, 5
REPAIR_ECHO_MAX_CHARS = 2000


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


class RiskAssessment(_Model):
    risk_score: int = Field(ge=0, le=100)
    risk_level: RiskLevel
    summary: str = Field(max_length=SUMMARY_MAX)
    reasoning: str = Field(max_length=REASONING_MAX)
    risk_factors: list[RiskFactor] = Field(default_factory=list, max_length=MAX_FACTORS)
    entities: list[Entity] = Field(default_factory=list, max_length=MAX_ENTITIES)
    flags: list[Flag] = Field(default_factory=list, max_length=MAX_FLAGS)
    recommended_action: str | None = Field(None, max_length=TEXT_MAX)
    confidence_factors: ConfidenceFactors | None = None


def _str(max_length: int, **extra: Any) -> dict:
    return {"type": "string", "maxLength": max_length, **extra}


RISK_JSON_SCHEMA: dict[str, Any] = {
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


def parse_assessment(text: str) -> ParsedAssessment:
    """Lenient parse of a model reply; `error` is set (and `assessment` None) when it cannot be used."""
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
    confidence = data.get("confidence_factors")
    confidence_model = None
    if isinstance(confidence, dict):
        try:
            confidence_model = ConfidenceFactors.model_validate(confidence)
        except ValidationError as exc:
            warnings.append(f"confidence_factors dropped: {exc.errors()[0]['msg']}")
    assessment = RiskAssessment(
        risk_score=score,
        risk_level=derived,  # type: ignore[arg-type]
        summary=_cut(data["summary"], SUMMARY_MAX) or "",
        reasoning=_cut(data["reasoning"], REASONING_MAX) or "",
        risk_factors=_optional_items(data, "risk_factors", RiskFactor, MAX_FACTORS, warnings),
        entities=_optional_items(data, "entities", Entity, MAX_ENTITIES, warnings),
        flags=_optional_items(data, "flags", Flag, MAX_FLAGS, warnings),
        recommended_action=_cut(data.get("recommended_action"), TEXT_MAX)
        if isinstance(data.get("recommended_action"), str)
        else None,
        confidence_factors=confidence_model,
    )
    return ParsedAssessment(assessment, derived, model_level, disagrees, None, warnings)


def repair_messages(messages: list[dict], bad_output: str, error: str) -> list[dict]:
    """The single repair attempt: the original conversation (same cached prefix) + the bad reply + a fix request."""
    echoed = (bad_output or "")[:REPAIR_ECHO_MAX_CHARS]
    instruction = (
        f"Your previous reply could not be used: {error}. Reply again with ONLY one JSON object that matches the "
        "schema in the instructions: risk_score (integer 0-100), risk_level, summary and reasoning are required. "
        "No prose, no code fences."
    )
    return [*messages, {"role": "assistant", "content": echoed}, {"role": "user", "content": instruction}]
