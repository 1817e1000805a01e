"""What can go wrong talking to llama-server, as exception types callers can tell apart.

Every message names the endpoint (method and URL) and never carries the API key: the transport scrubs it.
"""

from __future__ import annotations


class LlamaServerError(RuntimeError):
    """Base error; the message names the endpoint URL (never the API key)."""


class LlamaServerUnavailable(LlamaServerError):
    """Connection refused, timeouts or 5xx after all retries, or not ready within the start-up timeout."""


START_HINT = (
    "start one with `hsi llm serve` (the embedded llama.cpp server on 127.0.0.1:LLM_PORT) or the compose service "
    "(`docker compose -f docker-compose.prod.yml up -d ai-llm`), or point LLAMA_SERVER_URL at a running server"
)


class LlamaServerNotRunning(LlamaServerUnavailable):
    """Nothing listens at the URL (connection refused): no server is starting there, so waiting cannot help.

    A server that is starting binds its port first and answers 503 while it loads the model: that is waited for.
    """


class LlamaRequestRejected(LlamaServerError):
    """The server answered 4xx: the request is wrong and retrying cannot help."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status

    def __reduce__(self):  # keep `status` when pickled (e.g. across process boundaries)
        return (type(self), (str(self),), {"status": self.status})


class SchemaNotEnforced(LlamaServerError):
    """The server does not constrain output to a JSON schema: refuse to proceed."""


class TokenCountUnavailable(LlamaServerError):
    """The server cannot count prompt tokens exactly (no /apply-template, no chat-aware /tokenize): estimate instead."""
