"""What can go wrong talking to llama-server, as exception types callers can tell apart.

Every message names the endpoint (method and URL) and never carries the API key: the transport scrubs it.
"""

from __future__ import annotations


class LlamaServerError(RuntimeError):
    """Base error; the message names the endpoint URL (never the API key)."""


class LlamaServerUnavailable(LlamaServerError):
    """Connection refused, timeouts or 5xx after all retries, or not ready within the start-up timeout."""


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
