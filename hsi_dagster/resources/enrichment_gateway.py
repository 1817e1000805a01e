"""`HttpEnrichmentResource`: a vision gateway over HTTP, with ONE deadline for the whole exchange.

What is sent and how the reply is read and merged is the pure protocol in `core/context/gateway_protocol.py`. The
deadline (`timeout_seconds`, ENRICHMENT_TIMEOUT_SECONDS = 30 s) is enforced by waiting on a worker thread, not only
by httpx's per-read timeouts, which a server trickling bytes could outlast. When the deadline passes or the gateway
fails (connection refused, 5xx, bad JSON), the batch goes on with what is ready: the payloads already in the
records plus any streamed results, and `missing_types` names the requested types that did not complete.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import httpx
from pydantic import Field

from hsi_dagster.core.context.gateway_protocol import (
    ENRICH_PATH,
    EnrichmentResult,
    GatewayReplyError,
    Results,
    frigate_media_base,
    merge_results,
    missing_types,
    read_json_reply,
    read_stream_record,
    request_body,
)
from hsi_dagster.resources.enrichment import EnrichmentResource
from hsi_dagster.settings import HsiSettings


class _Exchange:
    """What the worker thread gathered; the caller reads it at the deadline, under the lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.results: Results = {}
        self.done: set[str] = set()
        self.gateway_missing: set[str] = set()
        self.complete = False
        self.error: str | None = None


def _exchange(client: httpx.Client, url: str, body: dict, deadline: float, out: _Exchange) -> None:
    try:
        with client.stream("POST", url, json=body) as response:
            if response.status_code != 200:
                out.error = f"gateway answered HTTP {response.status_code}"
                return
            if "ndjson" in response.headers.get("content-type", ""):
                for line in response.iter_lines():
                    if time.monotonic() > deadline:
                        return
                    if line.strip():
                        record = json.loads(line)
                        with out.lock:
                            read_stream_record(record, out.results, out.done)
            else:
                data = json.loads(response.read())
                with out.lock:
                    out.gateway_missing = read_json_reply(data, out.results)
            with out.lock:
                out.complete = True
    except GatewayReplyError as exc:
        out.error = str(exc)
    except Exception as exc:  # noqa: BLE001 - any gateway failure only means "types missing", never a crash
        if out.error is None:
            out.error = f"gateway request failed: {type(exc).__name__}: {exc}"


class HttpEnrichmentResource(EnrichmentResource):
    """POST the batch's detections (label, box, track, zones, Frigate's event and media URLs) to a vision gateway;
    never wait longer than `timeout_seconds` in total.

    A batch that is not fully enriched in time goes on with what is ready, and its context records which types
    are missing."""

    gateway_url: str = Field(description="Base URL of the vision gateway (ENRICHMENT_GATEWAY_URL).")
    timeout_seconds: float = Field(30.0, gt=0, description="One deadline for the whole exchange (s).")
    frigate_url: str = Field(
        "", description="Frigate's API, the base of the media URLs sent (FRIGATE_URL without credentials; '' = none)."
    )

    @classmethod
    def from_settings(cls, settings: HsiSettings) -> HttpEnrichmentResource:
        return cls(
            gateway_url=settings.ENRICHMENT_GATEWAY_URL,
            timeout_seconds=settings.ENRICHMENT_TIMEOUT_SECONDS,
            frigate_url=frigate_media_base(settings.FRIGATE_URL) or "",  # never its credentials
        )

    def fetch(
        self, batch: Mapping[str, Any], detections: Sequence[Mapping[str, Any]], types: Collection[str]
    ) -> EnrichmentResult:
        start = time.monotonic()
        deadline = start + self.timeout_seconds
        body = request_body(batch, detections, types, frigate_url=self.frigate_url)
        out = _Exchange()
        client = httpx.Client(timeout=httpx.Timeout(self.timeout_seconds))
        worker = threading.Thread(
            target=_exchange,
            args=(client, self.gateway_url.rstrip("/") + ENRICH_PATH, body, deadline, out),
            name="enrichment-gateway",
            daemon=True,
        )
        worker.start()
        worker.join(max(0.0, deadline - time.monotonic()))
        timed_out = worker.is_alive()
        client.close()  # on a timeout this drops the pooled connection; the daemon worker then ends on its own
        with out.lock:
            results = {key: dict(value) for key, value in out.results.items()}
            complete, done, gateway_missing, error = out.complete, set(out.done), set(out.gateway_missing), out.error
        errors = []
        if timed_out:
            errors.append(f"enrichment deadline of {self.timeout_seconds:g} s passed")
        elif error:
            errors.append(error)
        missing = missing_types(
            body["types"], complete=complete and not timed_out, done=done, gateway_missing=gateway_missing
        )
        return EnrichmentResult(merge_results(detections, results), missing, errors, time.monotonic() - start)
