"""`FrigateResource`: Frigate's HTTP API (`/api/events`, `/api/review`, `/api/config`) for the pull sensors and the CLI.

Paging `/api/events`: Frigate filters `after`/`before` strictly on `start_time` and orders by `start_time`
descending unless `sort=date_asc` is asked for (0.14+), with `limit` 100 by default. Pages are asked in ascending
order after the last start_time fully read; a full page's trailing events sharing its last start_time are asked
again on the next page (a strict `after` would skip their peers), and a page whose events all share one
start_time is asked again with a larger limit.

Reading `/api/review` (frigate/api/review.py, 0.14 to 0.18): no `sort` and no offset; items come newest first
(`start_time` descending), `limit` unbounded by default in 0.15+ (100 in 0.14), and a falsy `after` means the last
24 hours. The time filter changed: up to 0.16 `start_time > after` (and `end_time` null or `< before`), in later
versions any item overlapping [after, before] (`end_time` null or `> after`). `reviewed` also changed meaning: 0 is
"not reviewed" everywhere, 1 is "all" up to 0.15 but "reviewed only" since per-user review status. So the pull asks
`reviewed=0` and `reviewed=1` and joins them by id (every item on every version), and reads a whole answer by
asking again with a doubled `limit` until it comes back short (without an offset, a full answer cannot be continued).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import dagster as dg
import httpx

from hsi_dagster.core.context.gateway_protocol import frigate_media_base
from hsi_dagster.core.frigate.api_cursor import review_key
from hsi_dagster.settings import HsiSettings

MAX_PAGE_LIMIT = 10_000


class FrigateApiError(RuntimeError):
    """Frigate's API failed or answered something else than expected; the message names the endpoint."""


class FrigateWriteError(FrigateApiError):
    """A write-back call failed; `status_code` is Frigate's HTTP status, None when it did not answer."""

    def __init__(self, message: str, status_code: int | None) -> None:
        super().__init__(message)
        self.status_code = status_code


def _start(item: Any, endpoint: str) -> float:
    value = item.get("start_time") if isinstance(item, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FrigateApiError(f"{endpoint}: an event without a numeric start_time: {str(item)[:200]}")
    return float(value)


def _review_order(item: Any) -> tuple[float, str]:
    start = item.get("start_time") if isinstance(item, dict) else None
    number = float(start) if isinstance(start, (int, float)) and not isinstance(start, bool) else 0.0
    return number, str(item.get("id")) if isinstance(item, dict) else ""


class FrigateResource(dg.ConfigurableResource):
    """Frigate's API at `url` (its internal port, e.g. http://frigate:5000); empty `url` = not configured."""

    url: str = ""
    timeout_seconds: float = 10.0
    page_size: int = 100
    settle_seconds: float = 60.0  # the pull waits this long after an event ends (its description comes then)

    @classmethod
    def from_settings(cls, settings: HsiSettings) -> FrigateResource:
        return cls(
            url=settings.FRIGATE_URL or "",
            timeout_seconds=settings.FRIGATE_API_TIMEOUT_SECONDS,
            page_size=settings.FRIGATE_API_PAGE_SIZE,
            settle_seconds=settings.FRIGATE_API_SETTLE_SECONDS,
        )

    @property
    def base_url(self) -> str:
        if not self.url.strip():
            raise FrigateApiError("FRIGATE_URL is not set")
        return self.url.strip().rstrip("/")

    def _shown(self, path: str) -> str:
        """The endpoint as messages and logs name it: FRIGATE_URL without its user, password, query or fragment."""
        return f"{frigate_media_base(self.base_url) or '<FRIGATE_URL>'}{path}"

    def source_name(self, path: str) -> str:
        """The endpoint as stored rows name their source (frigate_sources, frigate_reviews.source): never a secret."""
        return self._shown(path)

    def _scrub(self, text: str) -> str:
        """An error's text with the full FRIGATE_URL (credentials and all) replaced by its shown form."""
        return text.replace(self.base_url, self._shown(""))

    def _get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        endpoint, shown = f"{self.base_url}{path}", self._shown(path)
        try:
            with httpx.Client(timeout=self.timeout_seconds) as client:
                response = client.get(endpoint, params=params)
        except httpx.HTTPError as exc:
            raise FrigateApiError(f"GET {shown}: {type(exc).__name__}: {self._scrub(str(exc))}") from None
        if response.status_code != 200:
            raise FrigateApiError(f"GET {shown}: HTTP {response.status_code}: {response.text[:200]}")
        try:
            return response.json()
        except ValueError:
            raise FrigateApiError(f"GET {shown}: the answer is not JSON: {response.text[:200]}") from None

    def fetch_config(self) -> dict[str, Any]:
        """`/api/config`: Frigate's resolved configuration (detect resolutions included)."""
        config = self._get("/api/config")
        if not isinstance(config, dict):
            raise FrigateApiError(f"GET {self._shown('/api/config')}: expected an object, got {type(config).__name__}")
        return config

    def events_after(self, after: float, *, max_items: int = 1000) -> list[dict[str, Any]]:
        """Events with start_time > `after`, oldest first, at most about `max_items` (whole start_times)."""
        endpoint = self._shown("/api/events")
        items: list[dict[str, Any]] = []
        cursor, limit = after, self.page_size
        while len(items) < max_items:
            page = self._get(
                "/api/events", {"after": repr(cursor), "limit": limit, "sort": "date_asc", "include_thumbnails": 0}
            )
            if not isinstance(page, list):
                raise FrigateApiError(f"GET {endpoint}: expected a list of events, got {type(page).__name__}")
            starts = [_start(item, endpoint) for item in page]
            if len(page) == limit and len(page) > 1 and starts[0] > starts[-1]:
                raise FrigateApiError(
                    f"GET {endpoint}: events came newest first although sort=date_asc was asked (Frigate before 0.14?)"
                )
            ordered = sorted(zip(starts, page, strict=True), key=lambda pair: pair[0])
            if len(page) < limit:
                items.extend(item for _, item in ordered)
                break
            last = ordered[-1][0]
            head = [(start, item) for start, item in ordered if start < last]
            if not head:  # a full page of one start_time: its peers may be beyond it
                if limit >= MAX_PAGE_LIMIT:
                    raise FrigateApiError(f"GET {endpoint}: more than {MAX_PAGE_LIMIT} events start at {last}")
                limit = min(limit * 2, MAX_PAGE_LIMIT)
                continue
            items.extend(item for _, item in head)
            cursor, limit = head[-1][0], self.page_size
        return items

    def reviews_after(self, after: float) -> list[Any]:
        """Every review item Frigate answers for `after` (see the module's docstring), oldest first; items of unknown
        shape are kept (the loader quarantines them with the reason)."""
        endpoint = self._shown("/api/review")
        found: dict[str, Any] = {}
        for reviewed in (0, 1):
            limit = self.page_size
            while True:
                answer = self._get("/api/review", {"after": repr(after), "limit": limit, "reviewed": reviewed})
                if not isinstance(answer, list):
                    raise FrigateApiError(
                        f"GET {endpoint}: expected a list of review items, got {type(answer).__name__}"
                    )
                if len(answer) < limit:
                    break
                if limit >= MAX_PAGE_LIMIT:
                    raise FrigateApiError(f"GET {endpoint}: more than {MAX_PAGE_LIMIT} review items after {after}")
                limit = min(limit * 2, MAX_PAGE_LIMIT)
            found.update((review_key(item)[0], item) for item in answer)
        return sorted(found.values(), key=_review_order)

    # --- the verdict written back (core/outbound/frigate_writeback.py: which Frigate versions have which endpoint) ---
    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        endpoint, shown = f"{self.base_url}{path}", self._shown(path)
        try:
            with httpx.Client(timeout=self.timeout_seconds) as client:
                response = client.request(method, endpoint, json=body)
        except httpx.HTTPError as exc:
            raise FrigateWriteError(f"{method} {shown}: {type(exc).__name__}: {self._scrub(str(exc))}", None) from None
        if not 200 <= response.status_code < 300:
            raise FrigateWriteError(
                f"{method} {shown}: HTTP {response.status_code}: {response.text[:200]}", response.status_code
            )
        try:
            return response.json()
        except ValueError:
            return None

    def event(self, event_id: str) -> dict[str, Any]:
        """`GET /api/events/<id>`: the event (its description under `data`, its `sub_label`)."""
        found = self._call("GET", f"/api/events/{quote(event_id, safe='')}")
        return found if isinstance(found, dict) else {}

    def set_description(self, event_id: str, description: str) -> None:
        """`POST /api/events/<id>/description` (Frigate 0.15+)."""
        self._call("POST", f"/api/events/{quote(event_id, safe='')}/description", {"description": description})

    def set_sub_label(self, event_id: str, sub_label: str) -> None:
        """`POST /api/events/<id>/sub_label` (Frigate 0.11+)."""
        self._call("POST", f"/api/events/{quote(event_id, safe='')}/sub_label", {"subLabel": sub_label})
