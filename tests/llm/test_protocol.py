"""llama-server's JSON on the wire (hsi_dagster/llm/protocol.py), without a server: request bodies, reading chat
replies, and reconciling /props with /slots."""

from __future__ import annotations

import json
import logging

import pytest

from hsi_dagster.llm.errors import LlamaServerError
from hsi_dagster.llm.protocol import (
    ChatStream,
    chat_body,
    chat_result,
    parse_json_object,
    schema_name,
    server_info_from_props,
)
from hsi_dagster.llm.transport import StreamProtocolError, StreamServerError

SCHEMA = {"title": "Risk assessment v2", "type": "object", "properties": {"risk": {"type": "string"}}}
WHERE = "GET http://127.0.0.1:1/props"


def test_chat_body_constrains_output_and_turns_thinking_off():
    body = chat_body([{"role": "user", "content": "x"}], SCHEMA, max_tokens=16, temperature=0, seed=None)
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Risk_assessment_v2", "schema": SCHEMA, "strict": True},
    }
    assert body["chat_template_kwargs"] == {"enable_thinking": False} and body["cache_prompt"] is True
    assert "seed" not in body and body["max_tokens"] == 16
    assert body["stream"] is True and body["return_progress"] is True  # ChatStream reads it back
    assert body["stream_options"] == {"include_usage": True}
    assert chat_body([], SCHEMA, max_tokens=1, temperature=0.2, seed=7)["seed"] == 7
    assert schema_name({}) == "response" and len(schema_name({"title": "x" * 100})) == 64


def test_reply_parsing_strips_thinking_and_says_why_it_failed():
    assert parse_json_object('<think>hmm</think>{"risk": "low"}', "stop") == ({"risk": "low"}, None)
    parsed, error = parse_json_object('{"risk": "lo', "length")
    assert parsed is None and error.startswith("invalid JSON") and "max_tokens too small" in error
    assert parse_json_object("[1, 2]", "stop") == (None, "expected a JSON object, got list")


def test_chat_result_reads_usage_or_falls_back_to_timings():
    reply = {
        "choices": [{"message": {"content": '{"risk": "high"}'}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 12}},
        "timings": {"prompt_n": 18, "predicted_n": 5, "cache_n": 12},
        "model": "m.gguf",
    }
    result = chat_result(reply, latency_ms=12.5, server_url="http://a")
    assert result.parsed == {"risk": "high"} and result.finish_reason == "stop" and result.server_url == "http://a"
    assert (result.usage.prompt_tokens, result.usage.completion_tokens, result.usage.cached_tokens) == (30, 5, 12)
    only_timings = chat_result({**reply, "usage": None}, latency_ms=1, server_url="")
    assert (only_timings.usage.prompt_tokens, only_timings.usage.cached_tokens) == (18, 12)
    with pytest.raises(KeyError):
        chat_result({"error": "nope"}, latency_ms=1, server_url="")


def test_props_and_slots_reconciled_to_the_smaller(caplog: pytest.LogCaptureFixture):
    props = {"default_generation_settings": {"n_ctx": 4096}, "total_slots": 3, "model_path": "/m/x.gguf"}
    info = server_info_from_props(props, None, WHERE)
    assert (info.slot_context, info.total_slots, info.model) == (4096, 3, "/m/x.gguf")
    caplog.set_level(logging.WARNING, logger="hsi_dagster.llm")
    info = server_info_from_props(props, [{"id": 0, "n_ctx": 2048}, {"id": 1, "n_ctx": 4096}], WHERE)
    assert (info.slot_context, info.total_slots) == (2048, 2)
    assert "using the smaller" in caplog.text and "using the smallest" in caplog.text
    from_slots = server_info_from_props({"model_alias": "alias"}, [{"n_ctx": 1024}], WHERE)
    assert (from_slots.slot_context, from_slots.total_slots, from_slots.model) == (1024, 1, "alias")
    with pytest.raises(LlamaServerError, match="did not report default_generation_settings.n_ctx"):
        server_info_from_props({}, None, WHERE)


# What llama-server streams (the shape recorded from the embedded server, figures shortened).
STREAMED = [
    '{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"model":"m",'
    '"object":"chat.completion.chunk","prompt_progress":{"total":30,"cache":0,"processed":0,"time_ms":0}}',
    '{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"model":"m",'
    '"object":"chat.completion.chunk","prompt_progress":{"total":30,"cache":0,"processed":30,"time_ms":95}}',
    '{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"model":"m"}',
    '{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"{\\"risk\\": "}}],"model":"m"}',
    '{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"\\"high\\"}"}}],"model":"m"}',
    '{"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"model":"m"}',
    '{"choices":[],"model":"m","usage":{"completion_tokens":5,"prompt_tokens":30,"total_tokens":35,'
    '"prompt_tokens_details":{"cached_tokens":12}},"timings":{"cache_n":12,"prompt_n":18,"predicted_n":5}}',
    "[DONE]",
]


def test_chat_stream_puts_the_chunks_back_together():
    stream = ChatStream()
    progress = [stream.feed(data) for data in STREAMED]
    # progress: the prompt started, the prompt evaluated, (a role chunk: none), two tokens, the finish, the usage
    assert progress == [True, True, False, True, True, True, True, True]
    assert stream.finished and stream.done and stream.tokens == 2
    result = chat_result(stream.reply(), latency_ms=3.0, server_url="http://a")
    assert result.parsed == {"risk": "high"} and result.finish_reason == "stop" and result.model == "m"
    assert (result.usage.prompt_tokens, result.usage.completion_tokens, result.usage.cached_tokens) == (30, 5, 12)
    assert result.timings == {"cache_n": 12, "prompt_n": 18, "predicted_n": 5}


def test_chat_stream_says_where_it_stood():
    stream = ChatStream()
    assert stream.describe() == "before any reply" and not stream.finished
    stream.feed(STREAMED[0])
    assert stream.describe() == "while evaluating the prompt (0 token(s) evaluated so far)"
    stream.feed(STREAMED[3])
    assert stream.describe() == "after 1 generated token(s)" and not stream.finished


def test_chat_stream_takes_a_whole_reply_from_a_server_that_does_not_stream():
    whole = {"choices": [{"message": {"content": '{"ok": true}'}, "finish_reason": "stop"}], "model": "m"}
    stream = ChatStream()
    assert stream.feed(json.dumps(whole)) and stream.finished
    assert stream.reply() == whole


def test_chat_stream_refuses_garbage_and_reports_error_events():
    with pytest.raises(StreamProtocolError, match="not JSON"):
        ChatStream().feed("<html>502 Bad Gateway</html>")
    with pytest.raises(StreamProtocolError, match="without choices"):
        ChatStream().feed('{"hello": "world"}')
    with pytest.raises(StreamServerError, match="context size") as err:
        ChatStream().feed('{"error": {"code": 400, "message": "exceeds the context size", "type": "x"}}')
    assert err.value.status == 400
