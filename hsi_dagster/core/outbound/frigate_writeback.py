"""The verdict written back to Frigate's events (FRIGATE_WRITEBACK), as plain values and decisions.

Frigate's HTTP API (checked in blakeblackshear/frigate, frigate/http.py and frigate/api/event.py per tag):
- `POST /api/events/<id>/sub_label` with `{"subLabel": ..., "subLabelScore": ...}`: since 0.11; the sub label is at
  most 100 characters (checked since 0.13, a pydantic max_length since 0.15).
- `POST /api/events/<id>/description` with `{"description": ...}`: since 0.15 (0.14 and older answer 404/405).
- `GET /api/events/<id>`: the event (its `data.description` since 0.14, `sub_label`).
Since 0.16 both writes need the admin role on the authenticated port (8971); the internal port 5000 (FRIGATE_URL,
as `hsi frigate import` uses it) is unauthenticated and treated as admin.

What is written, so that nothing of Frigate's own is lost: the description keeps Frigate's text (its GenAI
description) and gains one line `HSI risk: HIGH (72/100): <summary>`, replaced, never repeated, when a batch is
assessed again; the sub label `risk high` / `risk critical` is set for high and critical verdicts only, and only
when the event has no sub label of its own (a recognised face or plate is never overwritten).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hsi_dagster.core.frigate.identity import HSI_SUB_LABEL_PREFIX
from hsi_dagster.core.outbound.mqtt_messages import THREAT_LEVELS, clean_text

MARK = "HSI risk:"
# The mapping (core/frigate/identity.py) never reads a sub label with this prefix back as an identity: Frigate's next
# `update` of the tracked object carries it as `["risk high", null]`.
SUB_LABEL_PREFIX = HSI_SUB_LABEL_PREFIX
SUB_LABEL_MAX_CHARS = 100  # Frigate's limit
LINE_MAX_CHARS = 500
MAX_ATTEMPTS = 5  # a 5xx or an unreachable Frigate is retried at the next ticks, this many times in all

DONE, RETRY, FAILED = "done", "retry", "failed"


def verdict_line(level: str, score: int | None, summary: str | None) -> str:
    """The one line hsi owns in an event's description."""
    scored = f" ({score}/100)" if score is not None else ""
    return clean_text(f"{MARK} {level.upper()}{scored}: {clean_text(summary, LINE_MAX_CHARS)}", LINE_MAX_CHARS)


def merged_description(existing: object, line: str) -> str:
    """Frigate's description with hsi's line replaced (or added after a blank line)."""
    text = existing if isinstance(existing, str) else ""
    kept = [row for row in text.splitlines() if not row.startswith(MARK)]
    while kept and not kept[-1].strip():
        kept.pop()
    return "\n".join([*kept, "", line]) if kept else line


def existing_sub_label(event: dict[str, Any]) -> str | None:
    """The event's sub label: a string, or [name, score] as some Frigate versions return it."""
    value = event.get("sub_label")
    if isinstance(value, list) and value:
        value = value[0]
    return value if isinstance(value, str) and value.strip() else None


def sub_label_for(level: str, event: dict[str, Any]) -> str | None:
    """The sub label to set, or None: only for high/critical, never over a sub label that is not hsi's own."""
    if level not in THREAT_LEVELS:
        return None
    current = existing_sub_label(event)
    if current is not None and not current.startswith(SUB_LABEL_PREFIX):
        return None
    return (SUB_LABEL_PREFIX + level)[:SUB_LABEL_MAX_CHARS]


def outcome_for(status_code: int | None) -> str:
    """done for 2xx; retry for no answer (None) or 5xx / 429; failed for any other 4xx (the event is gone, the
    endpoint does not exist in this Frigate version, the request was refused)."""
    if status_code is None or status_code >= 500 or status_code == 429:
        return RETRY
    if 200 <= status_code < 300:
        return DONE
    return FAILED


@dataclass(frozen=True)
class WritebackTarget:
    """One assessed batch and the Frigate events (object ids) its detections came from."""

    batch_id: str
    camera_id: str
    risk_level: str
    risk_score: int | None
    summary: str | None
    event_ids: tuple[str, ...]
    attempts: int = 0
