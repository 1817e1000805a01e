"""plan_review_pull, the `/api/review` pull's pure planning: what is sent again, where the cursor stops, and the
cursor's JSON round trip (the sensor's tests run it against a fake Frigate; these pin its edges)."""

from __future__ import annotations

from typing import Any

from hsi_dagster.core.frigate.api_cursor import ReviewCursor, plan_review_pull

NOW = 1_800_000_000.0


def item(identifier: str, start: float, end: float | None, **changes: Any) -> dict[str, Any]:
    return {"id": identifier, "camera": "yard", "start_time": start, "end_time": end, "severity": "alert", **changes}


def plan(items: list[Any], cursor: ReviewCursor | None = None) -> Any:
    return plan_review_pull(items, cursor or ReviewCursor(), now=NOW, settle_seconds=60, max_hold_seconds=3600)


def test_an_item_open_for_longer_than_the_hold_no_longer_holds_the_cursor() -> None:
    parked = item("parked", NOW - 4000, None)
    recent = item("recent", NOW - 300, NOW - 200)
    first = plan([recent, parked])
    assert [i["id"] for i in first.send] == ["parked", "recent"]  # oldest first
    assert first.open == 0 and first.cursor.after == recent["start_time"]


def test_a_review_marked_seen_in_frigate_is_not_sent_again_but_a_changed_one_is() -> None:
    ended = item("a", NOW - 300, NOW - 200)
    first = plan([ended])
    assert plan([{**ended, "has_been_reviewed": True}], first.cursor).send == []
    changed = {**ended, "data": {"metadata": {"potential_threat_level": 2}}}
    assert plan([changed], first.cursor).send == [changed]


def test_the_cursor_never_moves_back_and_survives_its_json() -> None:
    cursor = ReviewCursor(NOW - 100, (("old", "x"),))
    assert ReviewCursor.from_json(cursor.to_json()) == cursor
    overlapping = item("long", NOW - 500, None)  # later Frigates return an open item that started before `after`
    got = plan([overlapping], cursor)
    assert got.cursor.after == NOW - 100 and got.open == 1 and got.send == [overlapping]
    assert plan([overlapping], got.cursor).send == []  # remembered while Frigate keeps returning it
    assert plan(["garbage"], cursor).send == ["garbage"] and plan(["garbage"], plan(["garbage"]).cursor).send == []
