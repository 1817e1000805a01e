"""Batch windows (contract section 2) as properties over generated detections, plus the exact boundaries."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hsi_dagster.core.intake.batching import (
    Batch,
    BatchRules,
    DetectionRef,
    assign_batches,
    closed_batches,
    is_closed,
    make_batch_id,
    next_close,
)
from hsi_dagster.settings import HsiSettings

T0 = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)
RULES = BatchRules()
WINDOW, IDLE, HOLD = timedelta(seconds=90), timedelta(seconds=30), timedelta(seconds=65)


def ref(
    detection_id: str,
    seconds: float,
    camera: str = "cam",
    label: str = "car",
    confidence: float = 0.5,
    track: str | None = None,
    tracking: bool | None = None,
) -> DetectionRef:
    return DetectionRef(detection_id, camera, T0 + timedelta(seconds=seconds), label, confidence, track, tracking)


def idle_until(members: list[DetectionRef]) -> datetime:
    """The contract's idle bound of a batch holding `members` (in batch order), written out from its text: the last
    detection + idle, or a still-reported track's latest report + the hold (an end, even at the same instant, ends
    the track)."""
    latest: dict[str, tuple[datetime, bool]] = {}
    for m in members:
        if m.track_id is None or m.tracking is None:
            continue
        seen = latest.get(m.track_id)
        if seen is not None and not seen[1] and seen[0] >= m.ts:
            continue  # reported at the instant it ended: still ended
        latest[m.track_id] = (m.ts, m.tracking)
    held = [ts + HOLD for ts, tracking in latest.values() if tracking]
    return max([members[-1].ts + IDLE, *held])


@st.composite
def detections(draw: st.DrawFn) -> list[DetectionRef]:
    """Whole and half seconds on a small range, so exact 30 s gaps and 90 s spans happen often."""
    count = draw(st.integers(0, 40))
    out = []
    for n in range(count):
        seconds = draw(st.integers(0, 600)) / 2
        camera = draw(st.sampled_from(["a", "b", "c.d"]))
        label = draw(st.sampled_from(["car", "person", "dog"]))
        confidence = draw(st.sampled_from([0.3, 0.89, 0.9, 0.97]))
        track = draw(st.sampled_from([None, "t1", "t2"]))
        tracking = draw(st.sampled_from([None, True, True, False])) if track else None
        out.append(ref(f"d{n:03d}", seconds, camera, label, confidence, track, tracking))
    return out


def by_id(items: list[DetectionRef]) -> dict[str, DetectionRef]:
    return {d.detection_id: d for d in items}


@settings(max_examples=300, deadline=None)
@given(detections())
def test_every_detection_is_in_exactly_one_batch(items: list[DetectionRef]) -> None:
    batches = assign_batches(items, RULES)
    assigned = [d for b in batches for d in b.detection_ids]
    assert sorted(assigned) == sorted(d.detection_id for d in items)


@settings(max_examples=300, deadline=None)
@given(detections())
def test_batches_respect_window_idle_and_fast_path(items: list[DetectionRef]) -> None:
    index = by_id(items)
    for batch in assign_batches(items, RULES):
        members = [index[i] for i in batch.detection_ids]
        assert {m.camera_id for m in members} == {batch.camera_id}
        assert [(m.ts, m.detection_id) for m in members] == sorted((m.ts, m.detection_id) for m in members)
        assert batch.started_at == members[0].ts and batch.last_ts == members[-1].ts
        if batch.close_reason == "fast_path":
            assert len(members) == 1 and RULES.is_fast_path(members[0]) and batch.closes_at == batch.started_at
            continue
        assert not any(RULES.is_fast_path(m) for m in members)
        assert batch.last_ts - batch.started_at < WINDOW
        assert all(m.ts < idle_until(members[:n]) for n, m in enumerate(members) if n)
        by_window, by_idle = batch.started_at + WINDOW, idle_until(members)
        assert batch.closes_at == min(by_window, by_idle)
        assert batch.close_reason == ("window" if by_window <= by_idle else "idle")


@settings(max_examples=300, deadline=None)
@given(detections())
def test_a_new_batch_opens_only_when_the_detection_could_not_join(items: list[DetectionRef]) -> None:
    """Greedy: consecutive regular batches of a camera are split exactly where the rules say."""
    index = by_id(items)
    regular: dict[str, list[Batch]] = {}
    for batch in sorted(assign_batches(items, RULES), key=lambda b: b.started_at):
        if batch.close_reason != "fast_path":
            regular.setdefault(batch.camera_id, []).append(batch)
    for batches in regular.values():
        for previous, following in zip(batches, batches[1:], strict=False):
            ts = following.started_at
            members = [index[i] for i in previous.detection_ids]
            assert ts - previous.started_at >= WINDOW or ts >= idle_until(members)
            assert (
                following.started_at >= previous.closes_at
            )  # so "a later detection opened the next batch" implies closed
        assert [b.trailing for b in batches] == [False] * (len(batches) - 1) + [True]


@settings(max_examples=200, deadline=None)
@given(detections(), st.randoms(use_true_random=False))
def test_arrival_order_does_not_matter(items: list[DetectionRef], rnd: random.Random) -> None:
    shuffled = list(items)
    rnd.shuffle(shuffled)
    assert assign_batches(shuffled, RULES) == assign_batches(items, RULES)


@settings(max_examples=200, deadline=None)
@given(detections(), st.integers(0, 800))
def test_closed_means_clock_past_closes_at_or_a_later_batch(items: list[DetectionRef], offset: int) -> None:
    as_of = T0 + timedelta(seconds=offset)
    batches = assign_batches(items, RULES)
    closed = closed_batches(batches, as_of)
    assert [(b.closes_at, b.batch_id) for b in closed] == sorted((b.closes_at, b.batch_id) for b in closed)
    for batch in batches:
        expected = as_of >= batch.closes_at or not batch.trailing
        assert (batch in closed) == expected == batch.closed(as_of)


@given(detections(), st.integers(-10, 700))
def test_next_close_is_the_earliest_close_of_the_windows_still_open(items: list[DetectionRef], offset: int) -> None:
    """What a sensor may wait for: no window closes between `as_of` and next_close, and at next_close one does."""
    as_of = T0 + timedelta(seconds=offset)
    batches = assign_batches(items, RULES)
    due = next_close(batches, as_of)
    still_open = [b for b in batches if not b.closed(as_of)]
    if not still_open:
        assert due is None
        return
    assert due is not None and due > as_of
    assert not any(b.closed(due - timedelta(microseconds=1)) for b in still_open)
    assert any(b.closed(due) for b in still_open)


@settings(max_examples=300, deadline=None)
@given(st.from_regex(r"[A-Za-z0-9_.-]{1,64}", fullmatch=True), st.text(min_size=1, max_size=128), st.integers(0, 10**9))
def test_batch_ids_are_valid_readable_partition_keys(camera: str, detection_id: str, micros: int) -> None:
    first = DetectionRef(detection_id, camera, T0 + timedelta(microseconds=micros), "car", 0.5)
    batch_id = make_batch_id(camera, first)
    assert batch_id == make_batch_id(camera, first)
    assert len(batch_id) <= 100
    assert "..." not in batch_id and "," not in batch_id and "/" not in batch_id
    assert all(ch.isprintable() and not ch.isspace() for ch in batch_id)
    assert first.ts.strftime("%Y%m%dT%H%M%S") in batch_id
    if "..." not in camera:
        assert batch_id.startswith(camera + "__")


def test_batch_id_depends_on_camera_and_first_detection_only() -> None:
    a = make_batch_id("cam", ref("x", 0))
    assert a != make_batch_id("cam", ref("y", 0)) != make_batch_id("cam2", ref("x", 0))
    assert a == assign_batches([ref("x", 0), ref("z", 5)], RULES)[0].batch_id


# ---- exact boundaries -------------------------------------------------------------------------------------
def ids(batches: list[Batch]) -> list[tuple[str, ...]]:
    return [b.detection_ids for b in batches]


def test_a_gap_of_exactly_the_idle_timeout_opens_a_new_batch() -> None:
    batches = assign_batches([ref("a", 0), ref("b", 30)], RULES)
    assert ids(batches) == [("a",), ("b",)]
    assert batches[0].close_reason == "idle" and batches[0].closes_at == T0 + IDLE
    just_under = assign_batches([ref("a", 0), ref("b", 29.999999)], RULES)
    assert ids(just_under) == [("a", "b")]


def test_a_span_of_exactly_the_window_opens_a_new_batch() -> None:
    chain = [ref(f"d{n}", n * 15) for n in range(7)]  # 0, 15, ..., 90
    batches = assign_batches(chain, RULES)
    assert ids(batches) == [tuple(f"d{n}" for n in range(6)), ("d6",)]
    assert batches[0].close_reason == "window" and batches[0].closes_at == T0 + WINDOW


def test_window_wins_a_tie() -> None:
    batch = assign_batches([ref(f"d{n}", n * 20) for n in range(4)], RULES)[0]  # last 60 s: 60 + 30 == 0 + 90
    assert batch.closes_at == T0 + WINDOW == batch.last_ts + IDLE
    assert batch.close_reason == "window"


def test_fast_path_is_alone_and_does_not_touch_the_regular_batch() -> None:
    items = [
        ref("car1", 0),
        ref("p", 10, label="person", confidence=0.95),
        ref("car2", 20),
        ref("p-low", 25, label="person", confidence=0.89),
    ]
    batches = assign_batches(items, RULES)
    assert sorted(ids(batches)) == [("car1", "car2", "p-low"), ("p",)]
    fast = next(b for b in batches if b.close_reason == "fast_path")
    assert fast.closes_at == fast.started_at and fast.closed(fast.started_at)
    # had the person extended the car batch, closes_at would be 10 + 30 or later
    regular = next(b for b in batches if b.close_reason != "fast_path")
    assert regular.last_ts == T0 + timedelta(seconds=25)


def test_the_last_batch_is_closed_by_the_clock_only_and_exactly_at_closes_at() -> None:
    (batch,) = assign_batches([ref("a", 0), ref("b", 10)], RULES)
    assert batch.trailing and batch.closes_at == T0 + timedelta(seconds=40)
    assert not batch.closed(T0 + timedelta(seconds=39, microseconds=999999))
    assert batch.closed(T0 + timedelta(seconds=40))
    assert is_closed(batch, T0, later_exists=True)


def test_rules_from_settings() -> None:
    settings_ = HsiSettings(
        _env_file=None,
        BATCH_WINDOW_SECONDS=60,
        BATCH_IDLE_TIMEOUT_SECONDS=10,
        FAST_PATH_LABELS="person, dog",
        FAST_PATH_CONFIDENCE=0.8,
    )  # type: ignore[call-arg]
    rules = BatchRules.from_settings(settings_)
    assert rules == BatchRules(60, 10, frozenset({"person", "dog"}), 0.8)
    assert ids(assign_batches([ref("a", 0), ref("b", 10)], rules)) == [("a",), ("b",)]


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        assign_batches([ref("a", 0), ref("a", 5)], RULES)
    with pytest.raises(ValueError, match="timezone-aware"):
        assign_batches([DetectionRef("a", "c", datetime(2026, 1, 1), "car", 0.5)], RULES)
    with pytest.raises(ValueError):
        BatchRules(window_seconds=0)


def test_a_still_reported_track_holds_the_batch_until_its_next_report_is_due() -> None:
    """Frigate's once-a-minute update of a standing person joins the batch (up to the window); exactly the hold after
    the track's latest report, or after its end, the idle rule applies again."""
    minute = [ref("a", 0, track="p", tracking=True), ref("b", 60, track="p", tracking=True)]
    assert ids(assign_batches(minute, RULES)) == [("a", "b")]
    batch = assign_batches(minute, RULES)[0]
    assert batch.closes_at == T0 + WINDOW and batch.close_reason == "window"
    exactly = [ref("a", 0, track="p", tracking=True), ref("b", 65, track="p", tracking=True)]
    assert ids(assign_batches(exactly, RULES)) == [("a",), ("b",)]
    assert assign_batches(exactly, RULES)[0].closes_at == T0 + HOLD
    other_object = [ref("a", 0, track="p", tracking=True), ref("car", 50)]  # the batch is open: anything joins
    assert ids(assign_batches(other_object, RULES)) == [("a", "car")]
    ended = [ref("a", 0, track="p", tracking=True), ref("end", 5, track="p", tracking=False), ref("b", 40)]
    assert ids(assign_batches(ended, RULES)) == [("a", "end"), ("b",)]
    unsaid = [ref("a", 0, track="p"), ref("b", 60, track="p")]  # no source said it is still tracked
    assert ids(assign_batches(unsaid, RULES)) == [("a",), ("b",)]
    off = BatchRules(track_hold_seconds=0)
    assert ids(assign_batches(minute, off)) == [("a",), ("b",)]
    with pytest.raises(ValueError, match="track_hold_seconds"):
        BatchRules(track_hold_seconds=-1)
