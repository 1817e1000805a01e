"""Run `hsi metrics serve` as the operator would (the installed console script, a real socket), bounded in time."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

HSI = Path(sys.executable).with_name("hsi")
READY = re.compile(r"at http://(?P<host>[^:/]+):(?P<port>\d+)/metrics")


@dataclass(frozen=True)
class Exporter:
    host: str
    port: int
    pid: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"


@contextmanager
def running_exporter(db_path: Path, *extra_args: str, timeout_s: float = 30.0) -> Iterator[Exporter]:
    """Start the exporter on a free port (`--port 0`), wait for its first answer, and always stop it."""
    env = {**os.environ, "HSI_ENV_FILE": os.devnull}
    process = subprocess.Popen(
        [str(HSI), "metrics", "serve", "--db", str(db_path), "--port", "0", *extra_args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + timeout_s
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], timeout_s)
        line = process.stdout.readline() if ready else ""  # it prints its address once it listens
        match = READY.search(line)
        assert match, f"hsi metrics serve did not start: {line!r} (exit {process.poll()})"
        exporter = Exporter(match["host"], int(match["port"]), process.pid)
        while True:
            try:
                if httpx.get(exporter.url, timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"{exporter.url} did not answer 200 within {timeout_s} s"
            time.sleep(0.1)
        yield exporter
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def listening_addresses(port: int) -> set[str]:
    """IPv4/IPv6 addresses with a socket in LISTEN state on `port`, from /proc/net/tcp{,6} (no tool needed)."""
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, port_hex = fields[1].split(":")
            if int(port_hex, 16) == port and fields[3] == "0A":  # 0A = LISTEN
                raw = bytes.fromhex(address)
                if width == 8:
                    found.add(".".join(str(b) for b in raw[::-1]))
                else:
                    found.add(raw.hex())
    return found
