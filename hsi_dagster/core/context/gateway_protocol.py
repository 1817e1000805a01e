"""The vision gateway's protocol, pure: the request body, the reply's records, and merging what arrived.

The exchange itself (HTTP, the one deadline) is `resources/enrichment_gateway.py`; this module decides what is
sent and what a batch goes on with.

    POST {gateway_url}/v1/enrich
    {"batch_id": "...", "camera_id": "...", "types": ["florence", "clip", ...],
     "detections": [{"detection_id": "...", "camera_id": "...", "ts": "2026-12-01T02:14:05.120000+00:00",
                     "label": "person", "confidence": 0.91,
                     "bbox": [0.42, 0.31, 0.55, 0.88],     # contract section 1: x1, y1, x2, y2 in 0..1; or null
                     "track_id": "1733018045.12-ab12cd",   # or null
                     "zones": ["porch", "driveway"],       # every current zone (Frigate's current_zones), or []
                     "source": {"kind": "frigate", "event_id": "1733018045.12-ab12cd",
                                "snapshot_url": "http://frigate:5000/api/events/1733018045.12-ab12cd/snapshot.jpg",
                                "clip_url": "http://frigate:5000/api/events/1733018045.12-ab12cd/clip.mp4",
                                "thumbnail_url": "http://frigate:5000/api/events/1733018045.12-ab12cd/thumbnail.jpg"}},
                    ...]}

`source` says where the frames are: for a detection from Frigate (detection ids `frigate:<event id>:...`) Frigate's
event id and the media URLs of that event on `FRIGATE_URL` (null URLs when it is not set); null for a record from
elsewhere (the gateway finds its frames by camera and time). The URLs never carry credentials: a user name,
password, query or fragment in FRIGATE_URL is dropped (`frigate_media_base`), so a gateway that needs Frigate's
authenticated port brings its own. Frigate answers 404 for a snapshot when the camera's `snapshots` are off and for
a clip when `record` is off; the thumbnail exists for every event.

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
from urllib.parse import quote, urlsplit, urlunsplit

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


def frigate_media_base(url: str | None) -> str | None:
    """FRIGATE_URL as the base of the media URLs sent to the gateway: scheme, host, port and path only (credentials,
    query and fragment dropped: a URL in a request body must never carry a secret); None when unset or not http(s)."""
    if not url or not url.strip():
        return None
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname
    if parts.scheme not in ("http", "https") or not host:
        return None
    netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port is not None else "")
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def frigate_event_id(detection: Mapping[str, Any]) -> str | None:
    """Frigate's event id of a detection made from Frigate (`frigate:<event id>:...`, core/frigate/mapping.py): its
    track id, else the id inside the detection id; None for a record from elsewhere."""
    detection_id = str(detection.get("detection_id", ""))
    if not detection_id.startswith("frigate:"):
        return None
    track_id = detection.get("track_id")
    if isinstance(track_id, str) and track_id:
        return track_id
    event_id = detection_id.split(":")[1]
    return event_id or None


def detection_source(detection: Mapping[str, Any], media_base: str | None) -> dict[str, Any] | None:
    """Where the gateway finds a detection's frames: Frigate's event and its media URLs, or None."""
    event_id = frigate_event_id(detection)
    if event_id is None:
        return None
    base = frigate_media_base(media_base)
    event = f"{base}/api/events/{quote(event_id, safe='')}" if base else None
    return {
        "kind": "frigate",
        "event_id": event_id,
        "snapshot_url": f"{event}/snapshot.jpg" if event else None,
        "clip_url": f"{event}/clip.mp4" if event else None,
        "thumbnail_url": f"{event}/thumbnail.jpg" if event else None,
    }


def _bbox(value: Any) -> list[float] | None:
    if isinstance(value, (list, tuple)) and len(value) == 4:
        try:
            return [float(v) for v in value]
        except (TypeError, ValueError):
            return None
    return None


def _zones(detection: Mapping[str, Any]) -> list[str]:
    """Every current zone: Frigate's list (enrichment.frigate.current_zones), else the record's one zone."""
    enrichment = detection.get("enrichment")
    frigate = enrichment.get("frigate") if isinstance(enrichment, Mapping) else None
    if isinstance(frigate, Mapping) and isinstance(frigate.get("current_zones"), list):
        return [zone for zone in frigate["current_zones"] if isinstance(zone, str)]
    zone = detection.get("zone")
    return [zone] if isinstance(zone, str) and zone else []


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def request_body(
    batch: Mapping[str, Any],
    detections: Sequence[Mapping[str, Any]],
    types: Collection[str],
    *,
    frigate_url: str | None = None,
) -> dict:
    """The POST body: the batch, the requested types and, per detection, what a vision service needs to find and
    judge its frames (id, camera, time, label, confidence, box, track, zones, source; never the payloads)."""
    return {
        "batch_id": str(batch.get("batch_id")),
        "camera_id": str(batch.get("camera_id")),
        "types": requested_types(types),
        "detections": [
            {
                "detection_id": str(d["detection_id"]),
                "camera_id": str(d.get("camera_id", batch.get("camera_id"))),
                "ts": _iso(d["ts"]),
                "label": str(d.get("label") or "unknown"),
                "confidence": _number(d.get("confidence")),
                "bbox": _bbox(d.get("bbox")),
                "track_id": str(d["track_id"]) if d.get("track_id") else None,
                "zones": _zones(d),
                "source": detection_source(d, frigate_url),
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
