"""A real MQTT broker for tests: Debian's mosquitto on 127.0.0.1 and a free port, with persistence on disk so a
restart keeps the sessions (subscriptions and queued QoS 1 messages) of persistent clients.

`ensure_mosquitto()` installs it with apt-get when it is missing (the machines run tests as root; .ci/run installs it
too). Every wait is bounded.
"""

from __future__ import annotations

import getpass
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

INSTALL_TIMEOUT_SECONDS = 300


def ensure_mosquitto() -> str:
    """The broker's path, installing Debian's package if needed."""
    found = shutil.which("mosquitto") or ("/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").exists() else None)
    if found:
        return found
    install = ["apt-get", "install", "-y", "-q", "mosquitto"]
    if subprocess.run(install, capture_output=True, timeout=INSTALL_TIMEOUT_SECONDS).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, timeout=INSTALL_TIMEOUT_SECONDS, check=True)
        subprocess.run(install, capture_output=True, timeout=INSTALL_TIMEOUT_SECONDS, check=True)
    found = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    assert Path(found).exists(), "apt-get installed mosquitto but the binary is not there"
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Mosquitto:
    """One broker process; `restart()` stops it cleanly (it writes its persistence file) and starts it again."""

    def __init__(self, folder: Path, port: int | None = None) -> None:
        self.binary = ensure_mosquitto()
        self.folder = folder
        self.port = port or free_port()
        self.config = folder / "mosquitto.conf"
        self.log = folder / "mosquitto.log"
        (folder / "data").mkdir(parents=True, exist_ok=True)
        self.config.write_text(
            f"listener {self.port} 127.0.0.1\n"
            f"user {getpass.getuser()}\n"  # run as root, mosquitto would drop to a user that cannot write here
            "allow_anonymous true\n"
            "persistence true\n"
            f"persistence_location {folder / 'data'}/\n"
            "autosave_interval 1\n"
            f"log_dest file {self.log}\n"
            "log_type all\n",
            encoding="utf-8",
        )
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 15.0) -> None:
        self.process = subprocess.Popen(
            [self.binary, "-c", str(self.config)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mosquitto exited with {self.process.returncode}: {self.tail_log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"mosquitto did not listen on 127.0.0.1:{self.port} within {timeout} s: {self.tail_log()}")

    def stop(self, timeout: float = 15.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=timeout)

    def restart(self) -> None:
        self.stop()
        self.start()

    def tail_log(self, chars: int = 2000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


@contextmanager
def running_broker(folder: Path) -> Iterator[Mosquitto]:
    """A started broker (its files in `folder`) for the block, stopped after: the tests' `broker` fixtures."""
    server = Mosquitto(folder)
    server.start()
    try:
        yield server
    finally:
        server.stop()
