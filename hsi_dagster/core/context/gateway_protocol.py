"""The vision gateway's protocol, pure: the request body, the reply's records, and merging what arrived.

The exchange itself (HTTP, the one deadline) is `resources/enrichment_gateway.py`; this module decides what is
sent and what a batch goes on with.

    POST {gateway_url}/v1/enrich
    {"batch_id": "...", "camera_id": "...", "types": ["florence", "clip", ...],
     "detections": [{"detection_id": "...", "camera_id": "...", "ts": "2026-12-01T02:14:05.120000+00:00"}, ...]}

    200, application/json:
    {"results": {"<detection_id>": {"<type>": <payload as in contract section 1>, ...}, ...},
     "missing": ["pose", ...]}            # optional: types the gateway itself could not produce

    or 200, application/x-ndjson (streamed; lets a batch keep what is ready when the deadline hits):
    {"detection_id": "...", "type": "clip", "payload": [...]}   # one result
    {"done": "clip"}                                             # every result of that type has been sent

A batch goes on with what is ready: payloads already in the records plus the gateway's, which fill or replace
them per type; `missing_types` names the requested types that did not complete.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hsi_dagster.core.context.enrichment import ENRICHMENT_TYPES

ENRICH_PATH = "/v1/enrich"

# detection_id -> enrichment type -> payload
Results = dict[str, dict[str, Any]]


@dataclass
class EnrichmentResult:
    detections: list[dict]
    missing_types: tuple[str, ...] = ()
    errors: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0


class GatewayReplyError(ValueError):
    """The gateway's reply does not follow the protocol (the batch goes on without its results)."""


def requested_types(types: Collection[str]) -> list[str]:
    """The known enrichment types asked for, in the contract's order."""
    wanted = set(types)
    return [t for t in ENRICHMENT_TYPES if t in wanted]


def _iso(ts: Any) -> str:
    return ts.isoformat() if isinstance(ts, datetime) else str(ts)


def request_body(batch: Mapping[str, Any], detections: Sequence[Mapping[str, Any]], types: Collection[str]) -> dict:
    """The POST body: the batch, the requested types and each detection's id, camera and time (no payloads)."""
    return {
        "batch_id": str(batch.get("batch_id")),
        "camera_id": str(batch.get("camera_id")),
        "types": requested_types(types),
        "detections": [
            {
                "detection_id": str(d["detection_id"]),
                "camera_id": str(d.get("camera_id", batch.get("camera_id"))),
                "ts": _iso(d["ts"]),
            }
            for d in detections
        ],
    }


def add_result(results: Results, detection_id: Any, kind: Any, payload: Any) -> None:
    """Keep one payload; unknown types, ids that are not strings and null payloads are dropped."""
    if isinstance(detection_id, str) and kind in ENRICHMENT_TYPES and payload is not None:
        results.setdefault(detection_id, {})[kind] = payload


def read_json_reply(data: Any, results: Results) -> set[str]:
    """Results of a whole (application/json) reply into `results`; returns the types the gateway says it lacks."""
    replies = data.get("results") if isinstance(data, dict) else None
    if not isinstance(replies, dict):
        raise GatewayReplyError("gateway reply has no 'results' object")
    for detection_id, payloads in replies.items():
        if isinstance(payloads, dict):
            for kind, payload in payloads.items():
                add_result(results, detection_id, kind, payload)
    return {m for m in (data.get("missing") or []) if isinstance(m, str)}


def read_stream_record(record: Any, results: Results, done: set[str]) -> None:
    """One line of a streamed (application/x-ndjson) reply: a result, or a type that is complete."""
    if not isinstance(record, dict):
        return
    if "done" in record:
        done.add(str(record["done"]))
    else:
        add_result(results, record.get("detection_id"), record.get("type"), record.get("payload"))


def missing_types(
    requested: Sequence[str], *, complete: bool, done: Collection[str], gateway_missing: Collection[str]
) -> tuple[str, ...]:
    """A complete reply lacks what the gateway says it lacks; otherwise every requested type not marked done."""
    if complete:
        return tuple(t for t in requested if t in gateway_missing)
    return tuple(t for t in requested if t not in done)


def merge_results(detections: Sequence[Mapping[str, Any]], results: Results) -> list[dict]:
    """Copies of the detections with the gateway's payloads over their own, per type (inputs left untouched)."""
    merged = []
    for detection in detections:
        record = dict(detection)
        enrichment = copy.deepcopy(dict(record.get("enrichment") or {}))
        enrichment.update(results.get(str(record["detection_id"]), {}))
        record["enrichment"] = enrichment or None
        merged.append(record)
    return merged
