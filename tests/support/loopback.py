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
