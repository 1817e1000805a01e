"""OpenAI-compatible servers without llama-server's own endpoints (vLLM), and what the client uses instead.

vLLM has no /props, /slots or /apply-template, and its /tokenize takes `messages`. The client detects this when
GET /props answers 404/405, and then:
- readiness comes from GET /v1/models when /health is missing (the client's readiness wait switches over);
- the slot count comes from configuration (`total_slots`, settings PARALLEL): nothing on the server reports it;
- the per-slot context comes from /v1/models `max_model_len`, else the configured `slot_context` (then marked
  `ServerInfo.slot_context_configured`, so a prompt budget names the settings as its source, not the server);
- exact prompt token counts come from vLLM's /tokenize with `messages` when it is there, else
  `TokenCountUnavailable` (callers budget with the cl100k estimate);
- completions name the model and drop llama-only fields. The schema-enforcement probe runs unchanged.
On llama-server none of this sends an extra request.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from hsi_dagster.llm.errors import LlamaRequestRejected, LlamaServerError, TokenCountUnavailable
from hsi_dagster.llm.protocol import NO_THINKING
from hsi_dagster.llm.slots import API_OPENAI, TOKENS_LLAMA, TOKENS_NONE, TOKENS_OPENAI, ServerInfo, ServerState
from hsi_dagster.llm.transport import Transport

logger = logging.getLogger("hsi_dagster.llm")

_PROBE_MESSAGES = [{"role": "user", "content": "x"}]
_COUNTED_BY = {TOKENS_OPENAI: "/tokenize with messages", TOKENS_LLAMA: "/apply-template + /tokenize"}


class OpenAICompat:
    """The fallback of one server; facts it learns (model id, token mode) go into the shared ServerState."""

    def __init__(
        self,
        transport: Transport,
        state: ServerState,
        *,
        total_slots: int | None = None,
        slot_context: int | None = None,
    ) -> None:
        self.transport = transport
        self.state = state
        self.total_slots = int(total_slots) if total_slots else None
        self.slot_context = int(slot_context) if slot_context else None

    def server_info(self) -> ServerInfo:
        """No /props: model and max_model_len from GET /v1/models, slot count from configuration (PARALLEL)."""
        where = self.transport.where("GET", "/v1/models")
        reply = self.transport.call("GET", "/v1/models")
        models = reply.get("data") if isinstance(reply, dict) else None
        if not isinstance(models, list) or not models or not isinstance(models[0], dict):
            raise LlamaServerError(f"{where} lists no model: {self.transport.describe(reply)}")
        model = models[0]
        reported = model.get("max_model_len")
        context = reported or self.slot_context
        base_url = self.transport.base_url
        if not context:
            raise LlamaServerError(
                f"{base_url} has no /props and {where} reports no max_model_len: configure the per-slot context "
                "(CTX_SIZE / PARALLEL)"
            )
        if not self.total_slots:
            raise LlamaServerError(
                f"{base_url} has no /props to report its slots: configure how many requests it may run at once "
                "(PARALLEL)"
            )
        model_id = str(model.get("id") or "unknown")
        self.state.openai_model = model_id
        return ServerInfo(
            slot_context=int(context),
            total_slots=self.total_slots,
            model=model_id,
            chat_template=None,
            build_info=str(model.get("owned_by")) if model.get("owned_by") else None,
            api=API_OPENAI,
            missing_endpoints=("/props",),
            slot_context_configured=not reported,
        )

    def detect_fallbacks(self, info: ServerInfo) -> ServerInfo:
        """Which llama-server-only endpoints are missing, and how (if at all) prompt tokens can be counted exactly."""
        missing = list(info.missing_endpoints)
        for path in ("/health", "/slots"):
            if self._is_missing("GET", path):
                missing.append(path)
        apply_missing = self._is_missing("POST", "/apply-template", {"messages": _PROBE_MESSAGES})
        mode = TOKENS_LLAMA
        if apply_missing:
            missing.append("/apply-template")
            try:
                self.token_ids(_PROBE_MESSAGES)
                mode = TOKENS_OPENAI
            except TokenCountUnavailable:
                missing.append("/tokenize")
                mode = TOKENS_NONE
        self.state.token_mode = mode
        info = dataclasses.replace(info, missing_endpoints=tuple(missing))
        logger.info(
            "%s is OpenAI-compatible: missing %s; slots from configuration (%d), context %d (%s), exact token counts: "
            "%s",
            self.transport.base_url,
            ", ".join(missing),
            info.total_slots,
            info.slot_context,
            "from configuration" if info.slot_context_configured else "/v1/models max_model_len",
            _COUNTED_BY.get(mode, "unavailable"),
        )
        return info

    def adapt_chat_body(self, body: dict[str, Any]) -> None:
        """Not llama-server: name the model, drop llama-only fields (in place)."""
        body.pop("cache_prompt", None)
        body.pop("return_progress", None)
        if self.state.openai_model:
            body["model"] = self.state.openai_model

    def token_ids(self, messages: list[dict]) -> list[int]:
        """vLLM's POST /tokenize {messages}: the chat template applied server-side, as in a completion."""
        body: dict[str, Any] = {
            "messages": messages,
            "add_generation_prompt": True,
            "chat_template_kwargs": dict(NO_THINKING),
        }
        if self.state.openai_model:
            body["model"] = self.state.openai_model
        where = self.transport.where("POST", "/tokenize")
        try:
            reply = self.transport.call("POST", "/tokenize", json_body=body)
        except LlamaRequestRejected as exc:
            if exc.status in (401, 403):
                raise
            raise self.no_token_count(f"{where} answered HTTP {exc.status}") from None
        tokens = reply.get("tokens") if isinstance(reply, dict) else None
        # llama-server's /tokenize ignores `messages` and returns no tokens: that is not a count.
        if not isinstance(tokens, list) or not tokens or not all(isinstance(t, int) for t in tokens):
            raise self.no_token_count(f"{where} does not tokenize chat messages")
        return tokens

    def no_token_count(self, why: str) -> TokenCountUnavailable:
        return TokenCountUnavailable(
            f"exact token count unavailable on this server ({self.transport.base_url}: {why}); "
            "budget prompts with the cl100k estimate instead"
        )

    def _is_missing(self, method: str, path: str, body: dict | None = None) -> bool:
        """One try at an endpoint: True when it is not there in llama-server's form (any 4xx but 401/403)."""
        try:
            self.transport.request(method, path, json_body=body, max_tries=1)
        except LlamaRequestRejected as exc:
            if exc.status in (401, 403):
                raise
            return True
        return False
