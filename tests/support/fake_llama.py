"""A FAKE llama-server for fault injection only: it runs no model and proves nothing about llama.cpp.

Real behaviour is tested against the real embedded server (tests/llm/test_client.py). This fake exists to
produce the failures a real server rarely shows on demand: 503 "Loading model", 5xx, 4xx, replies slower than
the read timeout, and a server that ignores the JSON schema. It records every request and the largest number
of completions (/v1/chat/completions) in flight at once.

Script it per test, e.g. `fake.script("/v1/chat/completions", Reply(500), Reply(500))`: queued replies are used
once each, in order; when the queue is empty the endpoint answers normally.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from hsi_dagster.llm.slots import reset_server_cache

LOADING = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}


@dataclass
class Reply:
    """One scripted answer: HTTP status and JSON body, after `delay` seconds (None body = the normal answer);
    `raw` bytes are sent as the body instead, as they are (e.g. a proxy's HTML page: not JSON at all)."""

    status: int = 200
    body: Any = None
    delay: float = 0.0
    raw: bytes | None = None


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict
    body: Any


def _value_for(spec: dict) -> Any:
    """A value satisfying a (simple) JSON-schema property, honouring `const` as a real server would."""
    if "const" in spec:
        return spec["const"]
    if spec.get("enum"):
        return spec["enum"][0]
    return {"string": "x", "integer": 1, "number": 0.5, "boolean": True, "array": [], "object": {}}.get(
        spec.get("type")
    )


@dataclass
class FakeLlama:
    slot_context: int = 4096
    total_slots: int = 2
    ignore_schema: bool = False
    fixed_reply: dict = field(default_factory=lambda: {"status": "ok"})
    requests: list[Recorded] = field(default_factory=list)
    max_in_flight: int = 0

    def __post_init__(self) -> None:
        self._scripts: dict[str, deque[Reply]] = defaultdict(deque)
        self._lock = threading.Lock()
        self._in_flight = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- scripting ---
    def script(self, path: str, *replies: Reply) -> None:
        with self._lock:
            self._scripts[path].extend(replies)

    def clear(self, path: str) -> None:
        """Drop the replies still queued for `path`: it answers normally from now on (the fault is over)."""
        with self._lock:
            self._scripts[path].clear()

    def loading_then_ready(self, times: int) -> None:
        self.script("/health", *[Reply(503, LOADING)] * times)

    def count(self, path: str) -> int:
        with self._lock:
            return sum(1 for r in self.requests if r.path == path)

    # --- lifecycle ---
    @property
    def url(self) -> str:
        assert self._server is not None, "fake not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeLlama:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:
                fake._handle(self, "GET")

            def do_POST(self) -> None:
                fake._handle(self, "POST")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        # The client keeps what it learned about a server per URL for the process (llm/slots.py SERVERS): an earlier
        # server on this reused port (an OpenAI-compatible fake, say) must not decide how this one is spoken to.
        reset_server_cache(self.url)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-llama", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            url = self.url
            self._server.shutdown()
            self._server.server_close()
            self._server = None
            reset_server_cache(url)

    # --- request handling ---
    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        path = handler.path.split("?")[0]
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        with self._lock:
            self.requests.append(Recorded(method, path, dict(handler.headers), body))
            if path == "/v1/chat/completions":
                self._in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self._in_flight)
            scripted = self._scripts[path].popleft() if self._scripts[path] else None
        try:
            reply = scripted or Reply()
            if reply.delay:
                time.sleep(reply.delay)
            status, payload = reply.status, reply.body
            if payload is None and status >= 400:
                payload = {"error": {"code": status, "message": f"injected fault {status}"}}
            elif payload is None:
                payload = self._normal(path, body)
                if payload is None:
                    status, payload = 404, {"error": {"code": 404, "message": "File Not Found"}}
            data = reply.raw if reply.raw is not None else json.dumps(payload).encode()
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (read timeout): expected in tests
            pass
        finally:
            if path == "/v1/chat/completions":
                with self._lock:
                    self._in_flight -= 1

    def _normal(self, path: str, body: Any) -> Any:
        if path == "/health":
            return {"status": "ok"}
        if path == "/props":
            return {
                "default_generation_settings": {"n_ctx": self.slot_context},
                "total_slots": self.total_slots,
                "model_path": "fake.gguf",
                "build_info": "fake",
                "chat_template": None,
            }
        if path == "/slots":
            return [{"id": i, "n_ctx": self.slot_context, "is_processing": False} for i in range(self.total_slots)]
        if path == "/v1/chat/completions":
            schema = (((body or {}).get("response_format") or {}).get("json_schema") or {}).get("schema") or {}
            if self.ignore_schema:
                content = json.dumps(self.fixed_reply)
            else:
                content = json.dumps({k: _value_for(v) for k, v in (schema.get("properties") or {}).items()})
            return {
                "choices": [
                    {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
                ],
                "model": "fake.gguf",
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 0}},
                "timings": {"prompt_n": 10, "predicted_n": 5},
            }
        return None
