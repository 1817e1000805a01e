"""Where enrichment payloads come from: inside the detection records (default) or a vision gateway over HTTP.

Gateway protocol (`HttpEnrichment`):

    POST {gateway_url}/v1/enrich
    {"batch_id": "...", "camera_id": "...", "types": ["florence", "clip", ...],
     "detections": [{"detection_id": "...", "camera_id": "...", "ts": "2026-12-01T02:14:05.120000+00:00"}, ...]}

    200, application/json:
    {"results": {"<detection_id>": {"<type>": <payload as in contract section 1>, ...}, ...},
     "missing": ["pose", ...]}            # optional: types the gateway itself could not produce

    or 200, application/x-ndjson (streamed; lets a batch keep what is ready when the deadline hits):
    {"detection_id": "...", "type": "clip", "payload": [...]}   # one result
    {"done": "clip"}                                             # every result of that type has been sent

The whole exchange has ONE deadline (`timeout_s`, ENRICHMENT_TIMEOUT_SECONDS = 30 s), enforced by waiting on a
worker thread, not only by httpx's per-read timeouts (a server trickling bytes could outlast those). When the
deadline passes or the gateway fails (connection refused, 5xx, bad JSON), the batch goes on with what is ready
(payloads already in the records plus any streamed results) and `missing_types` names the requested types that
did not complete. Payloads in the records are kept; gateway payloads fill or replace them per type.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import httpx

from hsi_dagster.core.enrichment import ENRICHMENT_TYPES

ENRICH_PATH = "/v1/enrich"


@dataclass
class EnrichmentResult:
    detections: list[dict]
    missing_types: tuple[str, ...] = ()
    errors: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0


class EnrichmentSource(Protocol):
    def fetch(
        self, batch: Mapping[str, Any], detections: Sequence[Mapping[str, Any]], types: Collection[str]
    ) -> EnrichmentResult:
        """Detections with their enrichment payloads for `types`, and the types that did not arrive in time."""


class InlineEnrichment:
    """Payloads are already inside the detection records (contract section 1): nothing to wait for."""

    def fetch(
        self, batch: Mapping[str, Any], detections: Sequence[Mapping[str, Any]], types: Collection[str]
    ) -> EnrichmentResult:
        return EnrichmentResult(detections=[dict(d) for d in detections])


def _iso(ts: Any) -> str:
    return ts.isoformat() if isinstance(ts, datetime) else str(ts)


class _Collected:
    """Results gathered by the worker thread (read by the caller at the deadline, under a lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.results: dict[str, dict[str, Any]] = {}
        self.done_types: set[str] = set()
        self.gateway_missing: set[str] = set()
        self.complete = False
        self.error: str | None = None

    def add(self, detection_id: Any, kind: Any, payload: Any) -> None:
        if isinstance(detection_id, str) and kind in ENRICHMENT_TYPES and payload is not None:
            with self.lock:
                self.results.setdefault(detection_id, {})[kind] = payload


class HttpEnrichment:
    """POST the batch's detection ids to a vision gateway; never wait longer than `timeout_s` in total."""

    def __init__(self, gateway_url: str, timeout_s: float = 30.0, *, transport: httpx.BaseTransport | None = None):
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.url = gateway_url.rstrip("/") + ENRICH_PATH
        self.timeout_s = timeout_s
        self._transport = transport

    def _run(self, client: httpx.Client, body: dict, deadline: float, out: _Collected) -> None:
        try:
            with client.stream("POST", self.url, json=body) as response:
                if response.status_code != 200:
                    out.error = f"gateway answered HTTP {response.status_code}"
                    return
                if "ndjson" in response.headers.get("content-type", ""):
                    for line in response.iter_lines():
                        if time.monotonic() > deadline:
                            return
                        if not line.strip():
                            continue
                        record = json.loads(line)
                        if "done" in record:
                            with out.lock:
                                out.done_types.add(record["done"])
                        else:
                            out.add(record.get("detection_id"), record.get("type"), record.get("payload"))
                else:
                    data = json.loads(response.read())
                    results = data.get("results") if isinstance(data, dict) else None
                    if not isinstance(results, dict):
                        out.error = "gateway reply has no 'results' object"
                        return
                    for detection_id, payloads in results.items():
                        if isinstance(payloads, dict):
                            for kind, payload in payloads.items():
                                out.add(detection_id, kind, payload)
                    missing = data.get("missing") or []
                    with out.lock:
                        out.gateway_missing.update(m for m in missing if isinstance(m, str))
                with out.lock:
                    out.complete = True
        except Exception as exc:  # noqa: BLE001 - any gateway failure only means "types missing", never a crash
            if out.error is None:
                out.error = f"gateway request failed: {type(exc).__name__}: {exc}"

    def fetch(
        self, batch: Mapping[str, Any], detections: Sequence[Mapping[str, Any]], types: Collection[str]
    ) -> EnrichmentResult:
        start = time.monotonic()
        deadline = start + self.timeout_s
        requested = [t for t in ENRICHMENT_TYPES if t in set(types)]
        body = {
            "batch_id": str(batch.get("batch_id")),
            "camera_id": str(batch.get("camera_id")),
            "types": requested,
            "detections": [
                {
                    "detection_id": str(d["detection_id"]),
                    "camera_id": str(d.get("camera_id", batch.get("camera_id"))),
                    "ts": _iso(d["ts"]),
                }
                for d in detections
            ],
        }
        out = _Collected()
        client = httpx.Client(timeout=httpx.Timeout(self.timeout_s), transport=self._transport)
        worker = threading.Thread(
            target=self._run, args=(client, body, deadline, out), name="enrichment-gateway", daemon=True
        )
        worker.start()
        worker.join(max(0.0, deadline - time.monotonic()))
        timed_out = worker.is_alive()
        client.close()  # on a timeout this drops the pooled connection; the daemon worker then ends on its own
        with out.lock:
            results = {k: dict(v) for k, v in out.results.items()}
            complete, done, gateway_missing, error = (
                out.complete,
                set(out.done_types),
                set(out.gateway_missing),
                out.error,
            )
        errors = []
        if timed_out:
            errors.append(f"enrichment deadline of {self.timeout_s:g} s passed")
        elif error:
            errors.append(error)
        if complete and not timed_out:
            missing = [t for t in requested if t in gateway_missing]
        else:
            missing = [t for t in requested if t not in done]
        merged = []
        for detection in detections:
            record = dict(detection)
            enrichment = copy.deepcopy(dict(record.get("enrichment") or {}))
            enrichment.update(results.get(str(record["detection_id"]), {}))
            record["enrichment"] = enrichment or None
            merged.append(record)
        return EnrichmentResult(merged, tuple(missing), errors, time.monotonic() - start)


def enrichment_source(backend: str, gateway_url: str, timeout_s: float) -> EnrichmentSource:
    """The source named by ENRICHMENT_BACKEND (inline | http)."""
    if backend == "inline":
        return InlineEnrichment()
    if backend == "http":
        return HttpEnrichment(gateway_url, timeout_s)
    raise ValueError(f"ENRICHMENT_BACKEND={backend!r} is invalid: accepted values are inline, http")
