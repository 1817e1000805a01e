"""FAULT INJECTION with the fake llama-server (tests/support/fake_llama.py; it runs no model): a model stuck in a
repetition loop ("looking at the car window" over and over, the issue's reply). Through the production call
(`assess_on_server`: the llm resource, the client, HTTP) and the verdict:

- the request bounds the loop: the schema sent has a maxLength on every string (the grammar closes them), and asks
  for deterministic sampling (temperature 0, a fixed seed);
- a reply cut at max_tokens inside the loop (finish_reason "length") is repaired once; a reply that loops up to the
  maxLength is stored with the phrase kept once, and the evidence floor still decides the level.
"""

from __future__ import annotations

import json

from hsi_dagster.assets.assessments import assess_on_server
from hsi_dagster.core.prompt.risk_schema import SUMMARY_MAX, assessment_schema
from hsi_dagster.core.prompt.rubric import RUBRIC_KEYS
from hsi_dagster.core.verdict.assessment import verdict_fields
from hsi_dagster.core.verdict.evidence import Floor
from tests.support.fake_llama import Reply
from tests.support.pipeline_helpers import resources

LOOP = "looking at the car window "
MESSAGES = [{"role": "system", "content": "instructions"}, {"role": "user", "content": "a batch"}]
PROBING = Floor(70, "high", ("probing: action.label 'looking into a car' on 4 frames of track t1 -> 70 high",), ())


def completion(content: str, finish_reason: str = "stop", tokens: int = 60) -> Reply:
    return Reply(
        body={
            "choices": [
                {"index": 0, "finish_reason": finish_reason, "message": {"role": "assistant", "content": content}}
            ],
            "model": "fake.gguf",
            "usage": {"prompt_tokens": 900, "completion_tokens": tokens, "prompt_tokens_details": {"cached_tokens": 0}},
        }
    )


def looping_reply(schema: str) -> str:
    """What the grammar lets a looping model write: each text filled with the loop up to its maxLength."""
    bounds = assessment_schema(schema)["properties"]
    text = {key: (LOOP * 40)[: bounds[key]["maxLength"]] for key in ("summary", "reasoning")}
    reply = {"risk_score": 8, "risk_level": "low", **text}
    if schema == "rubric":
        reply = {"observations": [(LOOP * 9)[:100]], "rubric": dict.fromkeys(RUBRIC_KEYS, False), **reply}
    return json.dumps(reply)


def test_a_looping_model_is_bounded_repaired_once_and_the_floor_still_decides(fake_llama, tmp_path):
    llm = resources(str(tmp_path / "hsi.duckdb"), fake_llama.url)["llm"]
    cut_at_max_tokens = '{"observations": ["' + LOOP * 300  # never closes: finish_reason length
    fake_llama.script(
        "/v1/chat/completions", completion(cut_at_max_tokens, "length", 1536), completion(looping_reply("rubric"))
    )
    outcome = assess_on_server(llm, MESSAGES, 1536, "rubric")
    assert outcome.repaired and outcome.ok
    fields, verdict = verdict_fields(outcome, PROBING, 0)
    assert fields["summary"].count("car window") == 1 and fields["summary"].endswith("…")
    assert len(fields["summary"]) <= SUMMARY_MAX and "repeats itself" in fields["error"]
    assert (fields["status"], fields["risk_level"], fields["model_score"], verdict.decided_by) == (
        "ok",
        "high",
        5,
        "floor",
    )
    sent = [r.body for r in fake_llama.requests if r.path == "/v1/chat/completions"]
    assert len(sent) == 2
    for body in sent:
        assert body["temperature"] == 0.0 and isinstance(body["seed"], int) and body["max_tokens"] == 1536
        schema = body["response_format"]["json_schema"]["schema"]
        assert schema == assessment_schema("rubric")
        assert schema["properties"]["summary"]["maxLength"] == SUMMARY_MAX
    assert "could not be used" in sent[1]["messages"][-1]["content"]
