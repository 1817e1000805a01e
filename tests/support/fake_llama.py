"""A FAKE llama-server for fault injection only: it runs no model and proves nothing about llama.cpp.

Real behaviour is tested against the real embedded server (tests/llm/test_client.py). This fake exists to
produce the failures a real server rarely shows on demand: 503 "Loading model", 5xx, 4xx, replies slower than
the read timeout, a stream that stalls mid-way or is garbage, and a server that ignores the JSON schema. It records
every request and the largest number of completions (/v1/chat/completions) in flight at once.

A completion that asks for `stream: true` is answered as llama-server does: server-sent events (a prompt_progress
chunk, the content a few characters per chunk, the finish, then usage and timings, then `data: [DONE]`).

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
from tests.support.loopback import CountsInFlight, InFlight

LOADING = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}


@dataclass
class Reply:
    """One scripted answer: HTTP status and JSON body, after `delay` seconds (None body = the normal answer);
    `raw` bytes are sent as the body instead, as they are (e.g. a proxy's HTML page: not JSON at all), with
    `content_type` (default application/json).

    Streamed completions only: `gap` seconds between chunks (a slow server that keeps generating); `stall_after`
    content chunks, then silence for `stall_seconds` and the connection closed without finishing (a stalled
    server); `error_after` content chunks, then this error event (`{"error": ...}`) instead of the rest."""

    status: int = 200
    body: Any = None
    delay: float = 0.0
    raw: bytes | None = None
    content_type: str = "application/json"
    gap: float = 0.0
    stall_after: int | None = None
    stall_seconds: float = 30.0
    error_after: tuple[int, dict] | None = None


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
class FakeLlama(CountsInFlight):
    slot_context: int = 4096
    total_slots: int = 2
    ignore_schema: bool = False
    fixed_reply: dict = field(default_factory=lambda: {"status": "ok"})
    requests: list[Recorded] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._scripts: dict[str, deque[Reply]] = defaultdict(deque)
        self._lock = threading.Lock()
        self._flight = InFlight()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()  # ends the stalls of streams still being answered

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
        self._stopping.set()
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
                self._flight.enter()
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
            if reply.raw is None and status < 400 and path == "/v1/chat/completions" and (body or {}).get("stream"):
                self._stream(handler, payload, reply)
                return
            data = reply.raw if reply.raw is not None else json.dumps(payload).encode()
            handler.send_response(status)
            handler.send_header("Content-Type", reply.content_type)
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (read timeout): expected in tests
            pass
        finally:
            if path == "/v1/chat/completions":
                self._flight.leave()

    def _stream(self, handler: BaseHTTPRequestHandler, reply: dict, script: Reply) -> None:
        """`reply` (a whole completion) as llama-server streams it, chunked, with the faults `script` asks for."""
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()

        def send(event: dict | str) -> None:
            text = event if isinstance(event, str) else json.dumps(event)
            data = f"data: {text}\n\n".encode()
            handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            handler.wfile.flush()

        base = {"model": reply.get("model"), "object": "chat.completion.chunk"}
        usage = reply.get("usage") or {}
        prompt_n = int(usage.get("prompt_tokens") or 0)
        role = {"index": 0, "delta": {"role": "assistant", "content": None}, "finish_reason": None}
        progress = {"total": prompt_n, "cache": 0, "processed": 0, "time_ms": 0}
        send({**base, "choices": [role], "prompt_progress": progress})
        choice = reply["choices"][0]
        content = choice["message"]["content"]
        pieces = [content[i : i + 3] for i in range(0, len(content), 3)]
        for number, piece in enumerate(pieces):
            if script.stall_after is not None and number == script.stall_after:
                self._stopping.wait(script.stall_seconds)
                handler.close_connection = True  # cut off: no finish, no terminating chunk
                return
            if script.error_after is not None and number == script.error_after[0]:
                send(script.error_after[1])
                break
            if script.gap:
                time.sleep(script.gap)
            send({**base, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
        else:
            send({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]})
            send({**base, "choices": [], "usage": usage, "timings": reply.get("timings")})
            send("[DONE]")
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()

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
