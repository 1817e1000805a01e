"""A fake Frigate HTTP API that serves recorded answers: `/api/events` with Frigate's own filtering and paging
(`after`/`before` strict on start_time, `limit` 100 by default, newest first unless `sort=date_asc`) and
`/api/config`. Used because no Frigate server can run here; the tests that use it say so."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


@contextmanager
def serve_on_loopback(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 (a free port) in a thread, for the block; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class FakeFrigate:
    def __init__(self, events: list[dict[str, Any]], config: dict[str, Any] | None = None) -> None:
        self.events = events
        self.config = config or {}
        self.requests: list[tuple[str, dict[str, str]]] = []

    def answer_events(self, query: dict[str, str]) -> list[dict[str, Any]]:
        items = list(self.events)
        if "after" in query:
            items = [e for e in items if e["start_time"] > float(query["after"])]
        if "before" in query:
            items = [e for e in items if e["start_time"] < float(query["before"])]
        ascending = query.get("sort") == "date_asc"
        items.sort(key=lambda e: e["start_time"], reverse=not ascending)  # stable: peers keep their stored order
        return items[: int(query.get("limit", 100))]


@contextmanager
def serve_frigate(fake: FakeFrigate) -> Iterator[str]:
    """The fake on 127.0.0.1 and a free port; yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            url = urlparse(self.path)
            query = {key: values[-1] for key, values in parse_qs(url.query).items()}
            fake.requests.append((url.path, query))
            if url.path == "/api/events":
                self._send(200, fake.answer_events(query))
            elif url.path == "/api/config":
                self._send(200, fake.config)
            else:
                self._send(404, {"success": False, "message": "not found"})

        def _send(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
            return

    with serve_on_loopback(Handler) as url:
        yield url
