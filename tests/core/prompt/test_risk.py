"""Risk output: level bands, think stripping, lenient parsing, derived level wins, errors, schema, repair."""

from __future__ import annotations

import json

import jsonschema
import pytest

from hsi_dagster.core.prompt.risk_schema import (
    RISK_JSON_SCHEMA,
    SUMMARY_MAX,
    RiskAssessment,
    assessment_schema,
    cut_repetition,
    level_for_score,
    parse_assessment,
    repair_messages,
    schema_max_chars,
)
from hsi_dagster.core.prompt.rubric import RUBRIC_KEYS, rubric_score
from hsi_dagster.core.prompt.tokens import TokenCounter
from hsi_dagster.settings import HsiSettings

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
        "summary": " ".join(f"word{i}" for i in range(200)),  # long, not a loop
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
    assert len(a.summary) == SUMMARY_MAX and [f.type for f in a.flags] == ["loitering"]
    assert a.risk_factors[0].contribution == 50 and a.entities[0].threat_level == "none"
    assert a.confidence_factors.enrichment_coverage == "partial"
    assert any("flags[1]" in w for w in parsed.warnings)


def _walk(schema, path="$"):
    yield path, schema
    for key, sub in schema.get("properties", {}).items():
        yield from _walk(sub, f"{path}.{key}")
    if "items" in schema:
        yield from _walk(schema["items"], f"{path}[]")


@pytest.mark.parametrize("name", ["plain", "rubric"])
def test_schema_is_flat_bounded_and_matches_the_model(name):
    schema = assessment_schema(name)
    text = json.dumps(schema)
    assert "$ref" not in text and "definitions" not in text and "$defs" not in text
    evidence = ["observations", "rubric"] if name == "rubric" else []
    assert schema["required"] == [*evidence, "risk_score", "risk_level", "summary", "reasoning"]
    assert list(schema["properties"])[: len(evidence) + 1] == [*evidence, "risk_score"]  # evidence before the score
    assert set(schema["properties"]) == set(RiskAssessment.model_fields) - ({"observations", "rubric"} - set(evidence))
    for path, node in _walk(schema):
        if node.get("type") == "string" and "enum" not in node:
            assert "maxLength" in node, path
        if node.get("type") == "array":
            assert "maxItems" in node, path
        if node.get("type") == "object":
            assert node.get("additionalProperties") is False, path
    assert schema["properties"]["risk_score"] == {"type": "integer", "minimum": 0, "maximum": 100}


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


RUBRIC_YES = {"unknown_person": True, "tries_door_or_window": True}
RUBRIC_REPLY = {
    "observations": ["unknown person at the car for 50 s", "tries the handle"],
    "rubric": {key: key in RUBRIC_YES for key in RUBRIC_KEYS},
    **GOOD,
}


def test_rubric_reply_parses_and_its_verdict_score_is_the_rubric_score_not_its_number():
    parsed = parse_assessment(json.dumps(RUBRIC_REPLY), "rubric")
    a = parsed.assessment
    assert parsed.error is None and a.observations == RUBRIC_REPLY["observations"]
    assert a.risk_score == 12 and a.verdict_score == rubric_score(RUBRIC_REPLY["rubric"]) == 68
    jsonschema.validate(a.model_dump(mode="json", exclude_none=True), assessment_schema("rubric"))
    plain = parse_assessment(json.dumps(GOOD))
    assert plain.assessment.verdict_score == 12 and plain.assessment.rubric is None


def test_rubric_answers_as_yes_no_words_are_accepted_and_a_missing_answer_is_an_error():
    words = {**RUBRIC_REPLY, "rubric": {key: "yes" if key in RUBRIC_YES else "No" for key in RUBRIC_KEYS}}
    assert parse_assessment(json.dumps(words), "rubric").assessment.verdict_score == 68
    missing = {**RUBRIC_REPLY, "rubric": {k: v for k, v in RUBRIC_REPLY["rubric"].items() if k != "violence"}}
    parsed = parse_assessment(json.dumps(missing), "rubric")
    assert parsed.assessment is None and "violence" in parsed.error
    no_rubric = parse_assessment(json.dumps(GOOD), "rubric")
    assert no_rubric.assessment is None and "rubric" in no_rubric.error
    assert "observations, rubric" in repair_messages([], "{}", no_rubric.error, "rubric")[-1]["content"]


@pytest.mark.parametrize(
    "answers, score, level",
    [
        ({}, 5, "low"),
        ({"unknown_person"}, 20, "low"),
        ({"tries_door_or_window"}, 5, "low"),  # a resident opening a door is not a sign
        ({"unknown_person", "loiters"}, 43, "medium"),
        ({"unknown_person", "face_concealed", "loiters"}, 61, "high"),
        ({"unknown_person", "tries_door_or_window"}, 68, "high"),
        ({"violence"}, 90, "critical"),
        ({"unknown_person", "carries_tool_or_weapon", "tries_door_or_window"}, 91, "critical"),
    ],
)
def test_rubric_score_table(answers, score, level):
    assert rubric_score({key: key in answers for key in RUBRIC_KEYS}) == score
    assert level_for_score(score) == level


def test_a_looping_phrase_is_cut_to_one_occurrence_and_prose_is_left_alone():
    loop = "A person is looking at the car window. " + "looking at the car window " * 12
    text, looped = cut_repetition(loop)
    assert looped and text.count("looking at the car window") == 2 and text.endswith("…")
    prose = "Observed: a courier at the door for 40 s. Inferred: routine delivery; nothing tried, nothing taken."
    assert cut_repetition(prose) == (prose, False)
    parsed = parse_assessment(json.dumps({**GOOD, "summary": loop[:150]}))
    assert parsed.assessment.summary.endswith("…") and any("repeats itself" in w for w in parsed.warnings)


LOOP = "looking at the car window "


def _filled(schema: dict):
    """The longest instance of `schema`: every string a loop of LOOP up to its maxLength, every list at maxItems,
    every optional field present (what a looping model can make the grammar emit)."""
    if "enum" in schema:
        return max(schema["enum"], key=lambda v: len(json.dumps(v)))
    kind = schema["type"]
    if kind == "string":
        return (LOOP * (schema["maxLength"] // len(LOOP) + 1))[: schema["maxLength"]]
    if kind == "integer":
        return schema.get("maximum", 100)
    if kind == "boolean":
        return False
    if kind == "array":
        return [_filled(schema["items"]) for _ in range(schema["maxItems"])]
    return {key: _filled(sub) for key, sub in schema["properties"].items()}


@pytest.mark.parametrize("name", ["plain", "rubric"])
def test_a_looping_reply_at_every_bound_fits_the_default_output_budget(name):
    """Fault model: the issue's loop ("looking at the car window" until the token limit). The grammar stops each
    string at its maxLength and each list at maxItems, so the longest reply the schema allows, every string a loop,
    is what such a model can emit: it must end (closing brace) before NEMOTRON_MAX_OUTPUT_TOKENS, counted as the
    served model counts (cl100k x PROMPT_TOKEN_RATIO, the calibrated worst case)."""
    schema = assessment_schema(name)
    longest = json.dumps(_filled(schema), ensure_ascii=False)
    jsonschema.validate(json.loads(longest), schema)
    assert len(longest) <= schema_max_chars(schema)
    defaults = {
        key: HsiSettings.model_fields[key].default for key in ("NEMOTRON_MAX_OUTPUT_TOKENS", "PROMPT_TOKEN_RATIO")
    }
    served_tokens = TokenCounter().count(longest) * defaults["PROMPT_TOKEN_RATIO"]
    assert served_tokens < defaults["NEMOTRON_MAX_OUTPUT_TOKENS"], (len(longest), served_tokens)
    # and the parser keeps one occurrence of the loop in each text it stores
    reply = parse_assessment(longest, name)
    assert reply.assessment is not None and reply.assessment.summary.count("car window") == 1
