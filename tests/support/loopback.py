"""HTTP test servers on 127.0.0.1: `serve_on_loopback` runs a handler in a thread for a block, `JsonHandler` answers
JSON and keeps quiet (the fakes of Frigate and the wheelhouse index use them)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@contextmanager
def serve_on_loopback(handler: Any, *ports: int) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 in a thread, for the block, on the first of `ports` that is free (none given, or
    none free: any free port); yields its base URL. `handler` is a request handler class (or a partial of one)."""
    server = None
    for port in ports:
        try:
            server = ThreadingHTTPServer(("127.0.0.1", port), handler)
            break
        except OSError:  # taken: the next one
            continue
    if server is None:
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class JsonHandler(BaseHTTPRequestHandler):
    """A handler that answers JSON (`send_json`) and logs nothing."""

    def send_json(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        return


class InFlight:
    """Requests being answered right now (`now`) and the most at once (`most`), counted from the handler threads of
    the fake llama-server and the counting proxy."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._now = 0
        self._most = 0

    @property
    def now(self) -> int:
        with self._lock:
            return self._now

    @property
    def most(self) -> int:
        with self._lock:
            return self._most

    def enter(self) -> None:
        with self._lock:
            self._now += 1
            self._most = max(self._most, self._now)

    def leave(self) -> None:
        with self._lock:
            self._now -= 1


class CountsInFlight:
    """`in_flight` and `max_in_flight` of a fake server or proxy that counts its requests in `self._flight`."""

    _flight: InFlight

    @property
    def in_flight(self) -> int:
        """Requests being answered right now."""
        return self._flight.now

    @property
    def max_in_flight(self) -> int:
        """The most requests answered at once."""
        return self._flight.most
