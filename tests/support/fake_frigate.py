"""A fake Frigate HTTP API that serves recorded answers: `/api/events` with Frigate's own filtering and paging
(`after`/`before` strict on start_time, `limit` 100 by default, newest first unless `sort=date_asc`), `/api/review`
as frigate/api/review.py answers it (newest first, no sort, no offset; `start_time > after` and `end_time` null or
`< before` up to 0.16, or `overlapping=True` for later versions' overlap filter; `reviewed` 0 = not reviewed, 1 =
reviewed only, absent = all, as since per-user review status) and `/api/config`; `review_status` set to an HTTP
status makes `/api/review` fail with it. Used because no Frigate server can run here; the tests that use it say so."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qs, urlparse

from tests.support.loopback import JsonHandler, serve_on_loopback


class FakeFrigate:
    def __init__(
        self,
        events: list[dict[str, Any]],
        config: dict[str, Any] | None = None,
        reviews: list[dict[str, Any]] | None = None,
        overlapping: bool = False,
    ) -> None:
        self.events = events
        self.config = config or {}
        self.reviews = reviews or []
        self.overlapping = overlapping
        self.review_status: int | None = None
        self.requests: list[tuple[str, dict[str, str]]] = []

    def answer_reviews(self, query: dict[str, str]) -> list[dict[str, Any]]:
        after = float(query.get("after") or 0) or 0.0  # Frigate: a falsy `after` is the last 24 hours; here all
        before = float(query.get("before") or 0) or float("inf")
        items = []
        for item in self.reviews:
            start, end = item.get("start_time", 0), item.get("end_time")
            if self.overlapping:
                keep = start < before and (end is None or end > after)
            else:
                keep = start > after and (end is None or end < before)
            if keep and "reviewed" in query:
                keep = bool(item.get("has_been_reviewed")) == (query["reviewed"] == "1")
            if keep:
                items.append(item)
        items.sort(key=lambda r: r.get("start_time", 0), reverse=True)
        return items[: int(query["limit"])] if "limit" in query else items

    def answer_events(self, query: dict[str, str]) -> list[dict[str, Any]]:
        items = list(self.events)
        if "after" in query:
            items = [e for e in items if e["start_time"] > float(query["after"])]
        if "before" in query:
            items = [e for e in items if e["start_time"] < float(query["before"])]
        ascending = query.get("sort") == "date_asc"
        items.sort(key=lambda e: e["start_time"], reverse=not ascending)  # stable: peers keep their stored order
        return items[: int(query.get("limit", 100))]


@contextmanager
def serve_frigate(fake: FakeFrigate) -> Iterator[str]:
    """The fake on 127.0.0.1 and a free port; yields its base URL."""

    class Handler(JsonHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            url = urlparse(self.path)
            query = {key: values[-1] for key, values in parse_qs(url.query).items()}
            fake.requests.append((url.path, query))
            if url.path == "/api/events":
                self.send_json(200, fake.answer_events(query))
            elif url.path == "/api/review" and fake.review_status is not None:
                self.send_json(fake.review_status, {"success": False, "message": "unavailable"})
            elif url.path == "/api/review":
                self.send_json(200, fake.answer_reviews(query))
            elif url.path == "/api/config":
                self.send_json(200, fake.config)
            else:
                self.send_json(404, {"success": False, "message": "not found"})

    with serve_on_loopback(Handler) as url:
        yield url
