"""llama-server's JSON on the wire: the request bodies the client sends and how its replies are read. No I/O.

Kept apart from the client so the exact shapes (json_schema response_format, thinking off, where usage and cache
figures come from, how /props and /slots are reconciled) can be read and tested in one place.

Completions are streamed (`stream: true`, server-sent events) so the client can tell a slow server from a stalled
one: llama-server sends `prompt_progress` while it evaluates the prompt (`return_progress`) and one chunk per
generated token, and its last chunk carries `usage` and `timings` (`stream_options.include_usage`). `ChatStream`
puts the chunks back together into the reply a non-streamed completion would have given.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any, TypedDict

from hsi_dagster.core.prompt.text import strip_think
from hsi_dagster.llm.errors import LlamaServerError
from hsi_dagster.llm.slots import ServerInfo
from hsi_dagster.llm.transport import StreamProtocolError, StreamServerError

logger = logging.getLogger("hsi_dagster.llm")

NO_THINKING = {"enable_thinking": False}  # Nemotron thinks by default; the pipeline wants the JSON only


class ChatOptions(TypedDict, total=False):
    """The sampling options the router and the `llm` resource pass on to LlamaClient.chat_json unchanged; its
    defaults (temperature 0, seed 42, no extra body keys) are the only ones."""

    temperature: float
    seed: int | None
    extra: dict | None


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int


@dataclass(frozen=True)
class ChatResult:
    content: str
    parsed: dict | None
    parse_error: str | None
    usage: Usage
    timings: dict = field(repr=False)
    model: str
    latency_ms: float
    finish_reason: str | None
    server_url: str = field(default="", compare=False)  # which server answered (several behind a router)


@dataclass(frozen=True)
class ModelIdentity:
    """The model a server reports (GET /v1/models): its id (an alias or the file's path) and, from llama.cpp's
    `meta`, its size in bytes. What model trust is measured for (core/verdict/trust.py)."""

    name: str
    size: int | None


def model_identity_from_models(reply: Any) -> ModelIdentity | None:
    """The first listed model of a /v1/models reply; None when the server lists none (it did not report its model)."""
    models = reply.get("data") if isinstance(reply, dict) else None
    if not isinstance(models, list) or not models or not isinstance(models[0], dict):
        return None
    model = models[0]
    name = model.get("id")
    if not isinstance(name, str) or not name.strip():
        return None
    meta = model.get("meta")
    size = meta.get("size") if isinstance(meta, dict) else None
    return ModelIdentity(name.strip(), int(size) if isinstance(size, int) and not isinstance(size, bool) else None)


def schema_name(schema: dict) -> str:
    """The `json_schema.name` the OpenAI API wants: the schema's title, restricted to [A-Za-z0-9_-], 64 chars."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", str(schema.get("title") or "response"))
    return name[:64] or "response"


def chat_body(
    messages: list[dict], schema: dict, *, max_tokens: int, temperature: float, seed: int | None
) -> dict[str, Any]:
    """POST /v1/chat/completions with output constrained to `schema`, thinking off, the prompt cache on."""
    body: dict[str, Any] = {
        "messages": messages,
        "max_tokens": int(max_tokens),
        "temperature": float(temperature),
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": schema_name(schema), "schema": schema, "strict": True},
        },
        "chat_template_kwargs": dict(NO_THINKING),
        "cache_prompt": True,
        # Streamed: each token (and each evaluated prompt batch) is a sign of life, so the read timeout measures
        # silence, not the length of a generation (ChatStream reads it back).
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_progress": True,
    }
    if seed is not None:
        body["seed"] = int(seed)
    return body


def parse_json_object(content: str, finish_reason: str | None) -> tuple[dict | None, str | None]:
    """(object, None) when the reply (a <think> block stripped) is a JSON object, else (None, why not)."""
    text = strip_think(content)
    hint = " (finish_reason=length: max_tokens too small?)" if finish_reason == "length" else ""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"invalid JSON: {exc}{hint}"
    if not isinstance(value, dict):
        return None, f"expected a JSON object, got {type(value).__name__}{hint}"
    return value, None


def chat_result(reply: Any, *, latency_ms: float, server_url: str) -> ChatResult:
    """Read a chat completion reply; token figures from `usage`, else from llama-server's `timings`.

    Raises KeyError/IndexError/TypeError/AttributeError when the reply has no choices[0].message.
    """
    choice = reply["choices"][0]
    content = choice["message"].get("content") or ""
    finish_reason = choice.get("finish_reason")
    parsed, parse_error = parse_json_object(content, finish_reason)
    usage_raw = reply.get("usage") or {}
    timings = reply.get("timings") or {}
    cached = (usage_raw.get("prompt_tokens_details") or {}).get("cached_tokens", timings.get("cache_n", 0))
    usage = Usage(
        prompt_tokens=int(usage_raw.get("prompt_tokens", timings.get("prompt_n", 0)) or 0),
        completion_tokens=int(usage_raw.get("completion_tokens", timings.get("predicted_n", 0)) or 0),
        cached_tokens=int(cached or 0),
    )
    return ChatResult(
        content=content,
        parsed=parsed,
        parse_error=parse_error,
        usage=usage,
        timings=timings,
        model=str(reply.get("model") or ""),
        latency_ms=latency_ms,
        finish_reason=finish_reason,
        server_url=server_url,
    )


def server_info_from_props(props: dict, slots: list | None, where: str) -> ServerInfo:
    """Per-slot context and slot count from /props, cross-checked against /slots (when given; the smaller wins)."""
    settings = props.get("default_generation_settings") or {}
    slot_context = settings.get("n_ctx")
    total_slots = props.get("total_slots")
    if slots:
        slot_ctxs = [int(s["n_ctx"]) for s in slots if isinstance(s, dict) and "n_ctx" in s]
        if total_slots is None:
            total_slots = len(slots)
        elif len(slots) != total_slots:
            logger.warning("%s says %s slots but /slots lists %d; using the smaller", where, total_slots, len(slots))
            total_slots = min(int(total_slots), len(slots))
        if slot_ctxs:
            if slot_context is None:
                slot_context = min(slot_ctxs)
            elif min(slot_ctxs) != slot_context:
                logger.warning(
                    "%s says %s tokens per slot but /slots says %s; using the smallest", where, slot_context, slot_ctxs
                )
                slot_context = min([int(slot_context), *slot_ctxs])
    if slot_context is None or total_slots is None:
        raise LlamaServerError(
            f"{where} did not report default_generation_settings.n_ctx and total_slots (and /slots is unavailable)"
        )
    return ServerInfo(
        slot_context=int(slot_context),
        total_slots=int(total_slots),
        model=str(props.get("model_alias") or props.get("model_path") or "unknown"),
        chat_template=props.get("chat_template"),
        build_info=props.get("build_info"),
    )


@dataclass
class ChatStream:
    """A streamed chat completion put back together, one server-sent event `data:` payload at a time.

    `feed` returns True when the payload showed progress (a prompt batch evaluated, a token, the finish or the
    usage): what the stall timeout waits for. A payload that is a whole (non-streamed) reply is accepted too: a
    server that ignores `stream` still answers. `reply()` is the reply in the non-streamed shape, for chat_result.
    """

    content: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict | None = None
    timings: dict | None = None
    model: str = ""
    prompt_processed: int = -1
    chunks: int = 0
    tokens: int = 0  # content deltas seen (about one per generated token)
    done: bool = False  # `data: [DONE]` seen
    whole: dict | None = None  # a non-streamed reply, when the server sent one

    def feed(self, data: str) -> bool:
        if data.strip() == "[DONE]":
            self.done = True
            return True
        try:
            chunk = json.loads(data)
        except ValueError:
            raise StreamProtocolError(f"a stream event that is not JSON: {data[:200]!r}") from None
        if not isinstance(chunk, dict):
            raise StreamProtocolError(f"a stream event that is not a JSON object: {data[:200]!r}")
        error = chunk.get("error")
        if error:
            status = error.get("code", 0) if isinstance(error, dict) else 0
            message = error.get("message", error) if isinstance(error, dict) else error
            raise StreamServerError(str(message), int(status) if isinstance(status, int) else 0)
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            raise StreamProtocolError(f"a stream event without choices: {data[:200]!r}")
        self.chunks += 1
        self.model = str(chunk.get("model") or self.model)
        progressed = False
        if choices and isinstance(choices[0], dict) and isinstance(choices[0].get("message"), dict):
            self.whole = chunk  # the server answered without streaming
            return True
        progress = chunk.get("prompt_progress")
        if isinstance(progress, dict):
            processed = int(progress.get("processed") or 0)
            progressed = processed > self.prompt_processed
            self.prompt_processed = max(self.prompt_processed, processed)
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            text = delta.get("content") if isinstance(delta, dict) else None
            if text:
                self.content.append(str(text))
                self.tokens += 1
                progressed = True
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
                progressed = True
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
            progressed = True
        if isinstance(chunk.get("timings"), dict):
            self.timings = chunk["timings"]
        return progressed

    @property
    def finished(self) -> bool:
        """The completion is complete: a whole reply, or a finish reason (the usage chunk and [DONE] may follow)."""
        return self.whole is not None or self.finish_reason is not None

    def describe(self) -> str:
        """Where the stream stood, for error messages: 'after 12 tokens', 'while evaluating the prompt (512 of ...)'."""
        if self.tokens:
            return f"after {self.tokens} generated token(s)"
        if self.prompt_processed >= 0:
            return f"while evaluating the prompt ({self.prompt_processed} token(s) evaluated so far)"
        return "before the first token" if self.chunks else "before any reply"

    def reply(self) -> dict:
        """The completion in the shape of a non-streamed reply (choices[0].message, usage, timings, model)."""
        if self.whole is not None:
            return self.whole
        return {
            "choices": [
                {
                    "index": 0,
                    "finish_reason": self.finish_reason,
                    "message": {"role": "assistant", "content": "".join(self.content)},
                }
            ],
            "usage": self.usage,
            "timings": self.timings,
            "model": self.model,
        }
