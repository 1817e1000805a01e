"""Risk output: level bands, think stripping, lenient parsing, derived level wins, errors, schema, repair."""

from __future__ import annotations

import json

import pytest

from hsi_dagster.core.risk import (
    RISK_JSON_SCHEMA,
    RiskAssessment,
    level_for_score,
    parse_assessment,
    repair_messages,
)

GOOD = {"risk_score": 12, "risk_level": "low", "summary": "Parcel delivered.", "reasoning": "Observed a courier."}


@pytest.mark.parametrize(
    "score, level",
    [
        (0, "low"),
        (29, "low"),
        (30, "medium"),
        (59, "medium"),
        (60, "high"),
        (84, "high"),
        (85, "critical"),
        (100, "critical"),
    ],
)
def test_level_at_every_boundary(score, level):
    assert level_for_score(score) == level


@pytest.mark.parametrize("bad", [-1, 101, 50.5, True, "50"])
def test_level_rejects_non_scores(bad):
    with pytest.raises(ValueError):
        level_for_score(bad)


def test_plain_json_parses():
    parsed = parse_assessment(json.dumps(GOOD))
    assert parsed.error is None and parsed.assessment == RiskAssessment(**GOOD)
    assert not parsed.level_disagrees and parsed.derived_level == parsed.model_level == "low"


def test_think_block_is_stripped_before_parsing():
    text = '<think>The caption mentions a knife, so maybe {"risk_score": 95}.</think>\n' + json.dumps(GOOD)
    assert parse_assessment(text).assessment.risk_score == 12  # not the 95 inside the reasoning


def test_unterminated_think_block_leaves_nothing_to_parse():
    parsed = parse_assessment('<THINK>still reasoning {"risk_score": 99, "summary": "a", "reasoning": "b"}')
    assert parsed.assessment is None and "no JSON object" in parsed.error


def test_lenient_extraction_from_prose_and_fences():
    fenced = "Here is the assessment:\n```json\n" + json.dumps(GOOD) + "\n```\nHope this helps."
    assert parse_assessment(fenced).assessment.risk_score == 12
    prose = 'Thinking {not json} ... {"note": 1} then ' + json.dumps({**GOOD, "risk_score": "45"}) + " done"
    parsed = parse_assessment(prose)
    assert parsed.assessment.risk_score == 45 and parsed.derived_level == "medium"
    assert parse_assessment(json.dumps({**GOOD, "risk_score": 44.6})).assessment.risk_score == 45


@pytest.mark.parametrize("raw, clamped, level", [(150, 100, "critical"), (-7, 0, "low")])
def test_score_is_clamped(raw, clamped, level):
    parsed = parse_assessment(json.dumps({**GOOD, "risk_score": raw, "risk_level": level}))
    assert parsed.assessment.risk_score == clamped and parsed.assessment.risk_level == level
    assert any("clamped" in w for w in parsed.warnings)


def test_derived_level_wins_and_disagreement_is_recorded():
    parsed = parse_assessment(json.dumps({**GOOD, "risk_score": 72, "risk_level": "Low"}))
    assert parsed.assessment.risk_level == "high" and parsed.derived_level == "high"
    assert parsed.model_level == "low" and parsed.level_disagrees


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("I cannot assess this.", "no JSON object"),
        (json.dumps({**GOOD, "risk_score": "high"}), "risk_score"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "risk_score"}), "risk_score"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "summary"}), "summary"),
        (json.dumps({**GOOD, "reasoning": "  "}), "reasoning"),
        ("", "no JSON object"),
    ],
)
def test_invalid_output_is_an_error(text, fragment):
    parsed = parse_assessment(text)
    assert parsed.assessment is None and fragment in parsed.error


def test_optional_parts_are_validated_item_by_item_and_text_is_bounded():
    reply = {
        **GOOD,
        "summary": "s" * 500,
        "flags": [
            {"type": "loitering", "description": "stayed 5 min", "severity": "alert"},
            {"type": "x", "description": "y", "severity": "apocalyptic"},
        ],
        "entities": [{"type": "person", "description": "courier", "threat_level": "none"}],
        "risk_factors": [{"factor_name": "night", "contribution": 80, "description": "after midnight"}],
        "confidence_factors": {"detection_quality": "high", "weather_impact": "none", "enrichment_coverage": "partial"},
        "recommended_action": "None needed.",
    }
    parsed = parse_assessment(json.dumps(reply))
    a = parsed.assessment
    assert len(a.summary) == 200 and [f.type for f in a.flags] == ["loitering"]
    assert a.risk_factors[0].contribution == 50 and a.entities[0].threat_level == "none"
    assert a.confidence_factors.enrichment_coverage == "partial"
    assert any("flags[1]" in w for w in parsed.warnings)


def _walk(schema, path="$"):
    yield path, schema
    for key, sub in schema.get("properties", {}).items():
        yield from _walk(sub, f"{path}.{key}")
    if "items" in schema:
        yield from _walk(schema["items"], f"{path}[]")


def test_schema_is_flat_bounded_and_matches_the_model():
    text = json.dumps(RISK_JSON_SCHEMA)
    assert "$ref" not in text and "definitions" not in text and "$defs" not in text
    assert RISK_JSON_SCHEMA["required"] == ["risk_score", "risk_level", "summary", "reasoning"]
    assert set(RISK_JSON_SCHEMA["properties"]) == set(RiskAssessment.model_fields)
    for path, node in _walk(RISK_JSON_SCHEMA):
        if node.get("type") == "string" and "enum" not in node:
            assert "maxLength" in node, path
        if node.get("type") == "array":
            assert "maxItems" in node, path
        if node.get("type") == "object":
            assert node.get("additionalProperties") is False, path
    assert RISK_JSON_SCHEMA["properties"]["risk_score"] == {"type": "integer", "minimum": 0, "maximum": 100}


def test_llama_cpp_accepts_the_schema():
    xllamacpp = pytest.importorskip("xllamacpp")
    grammar = xllamacpp.json_schema_to_grammar(json.dumps(RISK_JSON_SCHEMA))
    assert grammar and "risk_score" in grammar


def test_repair_messages_append_to_the_same_prefix():
    original = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    bad = "Sure! The risk is moderate." + "x" * 5000
    repaired = repair_messages(original, bad, "no JSON object found in the model output")
    assert repaired[:2] == original and original == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "U"},
    ]
    assert (
        repaired[2]["role"] == "assistant"
        and repaired[2]["content"].startswith("Sure!")
        and len(repaired[2]["content"]) <= 2000
    )
    assert (
        repaired[3]["role"] == "user"
        and "no JSON object" in repaired[3]["content"]
        and "ONLY one JSON object" in repaired[3]["content"]
    )
