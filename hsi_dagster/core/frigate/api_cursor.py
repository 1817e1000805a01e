"""Where the `/api/events` pull stands and which fetched events to ingest now (pure; the sensor and
`hsi frigate` keep the cursor)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hsi_dagster.core.frigate.fields import PayloadError, read_number


@dataclass(frozen=True)
class ApiCursor:
    """Where the `/api/events` pull stands: every event with start_time <= `after` is done, and `seen` lists the
    ids after it already ingested (events behind one still in progress)."""

    after: float = 0.0
    seen: frozenset[str] = frozenset()

    def to_json(self) -> str:
        return json.dumps({"after": self.after, "seen": sorted(self.seen)})

    @classmethod
    def from_json(cls, text: str | None) -> ApiCursor:
        if not text:
            return cls()
        data = json.loads(text)
        return cls(float(data.get("after", 0.0)), frozenset(data.get("seen", ())))


@dataclass(frozen=True)
class ApiPlan:
    ready: list[dict[str, Any]]
    cursor: ApiCursor
    waiting: int  # events still in progress or ended too recently (held for their final sub_label/description)


def _start(item: Any) -> float | None:
    try:
        return read_number(item.get("start_time"), "start_time") if isinstance(item, dict) else None
    except PayloadError:
        return None


def plan_api_pull(
    items: Sequence[Any], cursor: ApiCursor, *, now: float, settle_seconds: float, max_hold_seconds: float
) -> ApiPlan:
    """Which fetched events to ingest now and the next cursor (pure; `now` in epoch seconds).

    An event is ready once it ended `settle_seconds` ago (Frigate adds the sub_label and GenAI description around
    the end), or, whatever its state, once it started more than `max_hold_seconds` ago (a car parked all night
    must not hold back the pull). Items that are not events (no start_time) are ready at once: the mapping
    quarantines them. The cursor moves up to the last start_time before the first event still waiting.
    """

    def ready(item: Any) -> bool:
        start = _start(item)
        if start is None:
            return True
        if now - start > max_hold_seconds:
            return True
        end = item.get("end_time")
        return isinstance(end, (int, float)) and not isinstance(end, bool) and now - float(end) >= settle_seconds

    ordered = sorted(
        items, key=lambda item: (_start(item) or 0.0, str(item.get("id")) if isinstance(item, dict) else "")
    )
    hold_at: float | None = None
    to_ingest: list[dict[str, Any]] = []
    waiting = 0
    for item in ordered:
        identifier = str(item.get("id")) if isinstance(item, dict) else ""
        if not ready(item):
            waiting += 1
            start = _start(item)
            hold_at = start if hold_at is None else min(hold_at, start or hold_at)
            continue
        if identifier and identifier in cursor.seen:
            continue
        to_ingest.append(item)
    starts = [s for s in (_start(item) for item in ordered) if s is not None]
    if hold_at is None:
        after = max([cursor.after, *starts])
    else:
        before_hold = [s for s in starts if s < hold_at]
        after = max([cursor.after, *before_hold])
    seen = frozenset(
        str(item.get("id"))
        for item in ordered
        if isinstance(item, dict) and item.get("id") is not None and (_start(item) or 0.0) > after and ready(item)
    )
    return ApiPlan(to_ingest, ApiCursor(after, seen), waiting)
