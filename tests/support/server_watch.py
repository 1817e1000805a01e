"""What the llama.cpp server itself says is in flight: for concurrency tests."""

import re
import threading
import time

import httpx


class ServerWatcher:
    """Polls /slots and /metrics in a background thread: the SERVER's view of what is in flight and queued."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.max_processing = 0
        self.max_deferred = 0
        self.polls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=10) as http:
            while not self._stop.is_set():
                slots = http.get("/slots").json()
                metrics = http.get("/metrics").text
                deferred = re.search(r"^llamacpp:requests_deferred (\S+)$", metrics, re.M)
                assert deferred, "llamacpp:requests_deferred missing from /metrics"
                self.max_processing = max(self.max_processing, sum(bool(s["is_processing"]) for s in slots))
                self.max_deferred = max(self.max_deferred, int(float(deferred.group(1))))
                self.polls += 1
                time.sleep(0.01)

    def __enter__(self) -> "ServerWatcher":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
