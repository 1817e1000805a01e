"""A simulated stream played in real time into an inbox folder, one file a second (the live path's input)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hsi_dagster.synthetic.jsonl import write_jsonl
from hsi_dagster.synthetic.streams import AVERAGE_DETECTIONS_PER_EVENT, simulate

# Seconds of activity simulated before the first file and dropped: events last minutes, so the stream is at its
# steady rate from the first file instead of ramping up.
LIVE_WARMUP_SECONDS = 300.0


def simulate_live(
    inbox_dir: str | os.PathLike[str],
    rate_per_s: float,
    seconds: float,
    seed: int,
    *,
    file_interval_s: float = 1.0,
    start: datetime | None = None,
    activity_start: datetime | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Path]:
    """Play a stream in real time into `inbox_dir`: every `file_interval_s` one file with the detections of that
    interval, written under a hidden `.part` name then renamed, so a watcher never sees a half-written file.

    `rate_per_s` is the average detection rate (the stream is bursty, like real cameras). The activity depends on
    the time of day (lighting); `activity_start` plays the activity simulated from that moment, its timestamps
    moved to now, so a benchmark gets the same stream whenever it runs. Returns the files.
    """
    inbox = Path(inbox_dir)
    inbox.mkdir(parents=True, exist_ok=True)
    t0 = clock()
    begin = start or datetime.fromtimestamp(round(t0, 3), tz=UTC)
    activity = activity_start or begin
    events_per_hour = max(rate_per_s, 1e-6) * 3600 / AVERAGE_DETECTIONS_PER_EVENT
    warmup = LIVE_WARMUP_SECONDS
    simulated = simulate(
        seed, start=activity - timedelta(seconds=warmup), duration_s=seconds + warmup, events_per_hour=events_per_hour
    )
    stream = (shift_ts(record, begin - activity) for record in simulated)
    pending = next(stream, None)
    while pending is not None and _record_utc(pending) < begin:
        pending = next(stream, None)
    written: list[Path] = []
    intervals = max(1, int(-(-seconds // file_interval_s)))
    stamp = begin.strftime("%Y%m%dT%H%M%S")
    for k in range(intervals):
        until = begin + timedelta(seconds=(k + 1) * file_interval_s)
        chunk: list[dict[str, Any]] = []
        while pending is not None and _record_utc(pending) < until:
            chunk.append(pending)
            pending = next(stream, None)
        wait = t0 + (k + 1) * file_interval_s - clock()
        if wait > 0:
            sleep(wait)
        if chunk:
            target = inbox / f"live-{seed}-{stamp}-{k:06d}.jsonl"
            write_jsonl(target, chunk)
            written.append(target)
    return written


def shift_ts(record: dict[str, Any], delta: timedelta) -> dict[str, Any]:
    """The record with its `ts` moved by `delta`, written as it was (UTC `Z` or a local offset, milliseconds)."""
    if not delta:
        return record
    ts = datetime.fromisoformat(record["ts"].replace("Z", "+00:00")) + delta
    text = (
        ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        if record["ts"].endswith("Z")
        else ts.isoformat(timespec="milliseconds")
    )
    return {**record, "ts": text}


def _record_utc(record: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(record["ts"].replace("Z", "+00:00")).astimezone(UTC)
