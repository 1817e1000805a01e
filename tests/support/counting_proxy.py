"""A counting HTTP proxy in front of a real llama-server: how many completions the CLIENTS had in flight at once.

The server's own `/slots` cannot show oversubscription: llama-server never processes more requests than it has
slots and queues the rest internally (its `requests_deferred` gauge shows those only while they wait). This proxy
counts every completion from the moment a client sent it until its answer went back, which is exactly what the
slot bound promises.

`gated=True` holds every completion (counted as in flight) until the test opens `gate`: processes that start seconds
apart then all want the server at the same moment, the worst case a slow model on a real server produces anyway.

Everything else (/health, /props, /slots, /tokenize, /apply-template, ...) is forwarded untouched and not counted.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from tests.support.loopback import CountsInFlight, InFlight

COMPLETION_PATHS = frozenset({"/completion", "/completions", "/v1/completions", "/v1/chat/completions"})
_HOP_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "host"})


@dataclass
class Completion:
    path: str
    started: float
    ended: float | None = None
    status: int | None = None


@dataclass
class CountingProxy(CountsInFlight):
    """`CountingProxy(target_url).start()`; `.url` to give the clients; `.max_in_flight` after the load."""

    target_url: str
    gated: bool = False
    gate_timeout: float = 300.0
    completions: list[Completion] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self.gate = threading.Event()
        self._flight = InFlight()
        self._http = httpx.Client(base_url=self.target_url.rstrip("/"), timeout=httpx.Timeout(600.0, connect=5.0))
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "start() first"
        return f"http://127.0.0.1:{self._server.server_port}"

    def _enter(self, path: str) -> Completion:
        self._flight.enter()
        with self._lock:
            record = Completion(path, time.monotonic())
            self.completions.append(record)
            return record

    def _leave(self, record: Completion, status: int) -> None:
        self._flight.leave()
        with self._lock:
            record.ended, record.status = time.monotonic(), status

    def overlaps(self) -> int:
        """The largest number of recorded completions whose [started, ended] intervals overlap (a cross-check of
        max_in_flight from the timeline)."""
        with self._lock:
            events = sorted(
                [(c.started, 1) for c in self.completions] + [(c.ended, -1) for c in self.completions if c.ended],
                key=lambda event: (event[0], event[1]),
            )
        peak = current = 0
        for _, step in events:
            current += step
            peak = max(peak, current)
        return peak

    def start(self) -> CountingProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as httpx clients expect

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                path = self.path.split("?", 1)[0]
                record = proxy._enter(path) if self.command == "POST" and path in COMPLETION_PATHS else None
                status = 502
                try:
                    if record is not None and proxy.gated:
                        proxy.gate.wait(proxy.gate_timeout)
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
                    try:
                        answer = proxy._http.request(self.command, self.path, content=body, headers=headers)
                        status, content = answer.status_code, answer.content
                        kind = answer.headers.get("content-type", "application/json")
                    except httpx.HTTPError as exc:
                        content, kind = f"proxy: {type(exc).__name__}: {exc}".encode(), "text/plain"
                    self.send_response(status)
                    self.send_header("Content-Type", kind)
                    self.send_header("Content-Length", str(len(content)))
                    self.end_headers()
                    self.wfile.write(content)
                finally:
                    if record is not None:
                        proxy._leave(record, status)

            do_GET = do_POST = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="counting-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.gate.set()  # nothing stays held
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self._http.close()

    def __enter__(self) -> CountingProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
