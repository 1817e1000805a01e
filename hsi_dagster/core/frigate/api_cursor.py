"""Where the `/api/events` and `/api/review` pulls stand and which fetched items to store now (pure; the sensors
and `hsi frigate` keep the cursors)."""

from __future__ import annotations

import hashlib
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


# ------------------------------------------------------------------------------------------------ /api/review
@dataclass(frozen=True)
class ReviewCursor:
    """Where the `/api/review` pull stands: every review item with start_time <= `after` is final (ended
    `settle_seconds` ago, or held too long), and `seen` maps each item of the last answer to the fingerprint of the
    version stored, so an item is sent again only when it changed (its end, its severity, its GenAI summary)."""

    after: float = 0.0
    seen: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> str:
        return json.dumps({"after": self.after, "seen": dict(self.seen)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> ReviewCursor:
        if not text:
            return cls()
        data = json.loads(text)
        seen = data.get("seen") or {}
        return cls(float(data.get("after", 0.0)), tuple(sorted((str(k), str(v)) for k, v in dict(seen).items())))


@dataclass(frozen=True)
class ReviewPlan:
    send: list[Any]  # items new or changed since the version stored, oldest first
    cursor: ReviewCursor
    open: int  # items not final yet (in progress, or ended less than settle_seconds ago): read again next tick


def review_key(item: Any) -> tuple[str, str]:
    """(the item's key, the fingerprint of this version): the id when it has one, else the fingerprint itself.
    `has_been_reviewed` is left out: a household marking an item seen changes nothing hsi stores."""
    body = {k: v for k, v in item.items() if k != "has_been_reviewed"} if isinstance(item, dict) else item
    fingerprint = hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:16]
    identifier = item.get("id") if isinstance(item, dict) else None
    return (str(identifier) if isinstance(identifier, str) and identifier else f"#{fingerprint}"), fingerprint


def plan_review_pull(
    items: Sequence[Any], cursor: ReviewCursor, *, now: float, settle_seconds: float, max_hold_seconds: float
) -> ReviewPlan:
    """Which fetched review items to store now and the next cursor (pure; `now` in epoch seconds).

    Every new or changed item is sent at once (a batch judged while a review is in progress sees it; storage merges
    its later versions into one row). The cursor moves up to the last start_time before the first item not final
    yet, so an in-progress item is read again until its end (and the GenAI summary that follows it) is in. Items of
    unknown shape (no numeric start_time) are sent once: the loader quarantines them with the reason.
    """

    def final(item: Any) -> bool:
        start = _start(item)
        if start is None or now - start > max_hold_seconds:
            return True
        end = item.get("end_time")
        return isinstance(end, (int, float)) and not isinstance(end, bool) and now - float(end) >= settle_seconds

    ordered = sorted(
        items, key=lambda item: (_start(item) or 0.0, str(item.get("id")) if isinstance(item, dict) else "")
    )
    seen = dict(cursor.seen)
    keys = [review_key(item) for item in ordered]
    send = [item for item, (key, print_) in zip(ordered, keys, strict=True) if seen.get(key) != print_]
    pending = [s for item in ordered if not final(item) and (s := _start(item)) is not None]
    starts = [s for s in (_start(item) for item in ordered) if s is not None]
    if pending:
        starts = [s for s in starts if s < min(pending)]
    after = max([cursor.after, *starts])
    return ReviewPlan(send, ReviewCursor(after, tuple(sorted(dict(keys).items()))), len(pending))
