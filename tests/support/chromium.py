"""Headless Chromium (Debian's package) driven over the DevTools protocol with `websockets`: no driver binary and
no browser download. Enough for UI tests: open a page, wait for a DOM condition, read values, take a screenshot."""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import ClientConnection, connect

from hsi_dagster.llm.embedded import free_port
from tests.support.processes import stop_group

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-dev-shm-usage",
    "--remote-debugging-address=127.0.0.1",
    # Nothing leaves the machine: names other than loopback do not resolve, and any other request goes to a dead
    # local proxy (the Dagster UI links to, and embeds, pages on the internet).
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost",
    "--proxy-server=http://127.0.0.1:9",
)


class Page:
    """One tab: DevTools commands by id; events that arrive in between are dropped."""

    def __init__(self, socket: ClientConnection):
        self.socket = socket
        self.next_id = 0

    def send(self, method: str, params: dict | None = None, timeout_s: float = 30.0) -> dict:
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params or {}}))
        deadline = time.monotonic() + timeout_s
        while True:
            message = json.loads(self.socket.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def goto(self, url: str) -> None:
        self.send("Page.navigate", {"url": url})

    def wait_for(self, expression: str, timeout_s: float = 60.0, what: str = "") -> Any:
        """Poll a JavaScript expression until it is truthy; returns its value."""
        deadline = time.monotonic() + timeout_s
        value = None
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.25)
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what or expression} (last: {value!r})")

    def screenshot(self, path: Path) -> bytes:
        data = base64.b64decode(self.send("Page.captureScreenshot", {"format": "png"})["data"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return data


@contextmanager
def chromium_page(binary: str, profile_dir: Path, *, width: int = 1600, height: int = 1000) -> Iterator[Page]:
    """A fresh headless Chromium (its own --user-data-dir) on a loopback debugging port; killed at the end."""
    port = free_port()
    log = open(profile_dir.parent / f"chromium-{port}.log", "w")  # noqa: SIM115 - closed in finally
    process = subprocess.Popen(
        [
            binary,
            *FLAGS,
            f"--user-data-dir={profile_dir}",
            f"--remote-debugging-port={port}",
            f"--window-size={width},{height}",
            "about:blank",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its renderer and helper processes share this group: stopped together below
    )
    try:
        deadline = time.monotonic() + 30
        target = None
        while target is None:
            assert process.poll() is None, (profile_dir.parent / f"chromium-{port}.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "Chromium's DevTools endpoint did not answer"
            try:
                pages = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=2).json()
                target = next((t for t in pages if t.get("type") == "page"), None)
            except (httpx.TransportError, ValueError):
                pass
            if target is None:
                time.sleep(0.2)
        with connect(target["webSocketDebuggerUrl"], max_size=64 * 2**20, open_timeout=10) as socket:
            page = Page(socket)
            page.send("Page.enable")
            page.send(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            )
            yield page
    finally:
        stop_group(process, grace_s=10, first=signal.SIGTERM)
        log.close()
