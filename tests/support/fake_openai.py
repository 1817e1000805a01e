"""A FAKE OpenAI-compatible server shaped like vLLM, for the client's fallback logic only: it runs no model.

It proves only that the client copes with llama-server's own endpoints being absent (/props, /slots,
/apply-template: 404; /health optional) and uses what vLLM offers instead: GET /v1/models (`max_model_len`) and
POST /tokenize with `messages` (optional). Whether a real vLLM honours json_schema is not tested here.
Built on tests/fake_llama.py, so requests are recorded and replies can be scripted the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.support.fake_llama import FakeLlama

_LLAMA_ONLY = ("/props", "/slots", "/apply-template")


def fake_token_count(messages: list[dict]) -> int:
    """The fake's "tokenizer": words of every message plus 4 template tokens per message and 3 for the reply."""
    return sum(len(str(m.get("content", "")).split()) + 4 for m in messages) + 3


@dataclass
class FakeOpenAI(FakeLlama):
    model_id: str = "nvidia/fake-nemotron"
    max_model_len: int | None = 8192
    has_health: bool = False  # real vLLM has /health; off by default so readiness must come from /v1/models
    tokenize_messages: bool = True  # vLLM's chat-aware /tokenize

    def _normal(self, path: str, body: Any) -> Any:
        if path in _LLAMA_ONLY:
            return None  # 404
        if path == "/health":
            return {} if self.has_health else None
        if path == "/v1/models":
            entry: dict[str, Any] = {"id": self.model_id, "object": "model", "owned_by": "vllm"}
            if self.max_model_len is not None:
                entry["max_model_len"] = self.max_model_len
            return {"object": "list", "data": [entry]}
        if path == "/tokenize":
            messages = (body or {}).get("messages") if isinstance(body, dict) else None
            if not self.tokenize_messages or not isinstance(messages, list):
                return None
            count = fake_token_count(messages)
            return {"count": count, "max_model_len": self.max_model_len, "tokens": list(range(1, count + 1))}
        return super()._normal(path, body)
