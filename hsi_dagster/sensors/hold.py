"""Holding a sensor tick: Dagster's sensor daemon evaluates sensors every 5 s whatever their minimum interval, so a
tick that ends at once leaves a window closing just after it waiting up to 5 s. The window sensors instead hold
their tick for up to SENSOR_HOLD_SECONDS, watching files (a stat each poll) and the next window close."""

import os
import time
from collections.abc import Sequence

from hsi_dagster.sensors.window_planning import WindowPlan

HOLD_POLL_SECONDS = 0.1
HOLD_LINGER_SECONDS = 0.5  # a tick with runs to request still waits this long for the next close (same tick)


def watched_version(watch: Sequence[str | os.PathLike[str]]) -> tuple[int | None, ...]:
    """Changes whenever a watched file is written, or a file is created, renamed or removed in a watched folder
    (a stat each: cheap to poll)."""
    versions: list[int | None] = []
    for path in watch:
        try:
            versions.append(os.stat(path).st_mtime_ns)
        except OSError:
            versions.append(None)
    return tuple(versions)


def wait_for_change(
    due: float | None,
    until: float,
    watch: Sequence[str | os.PathLike[str]] = (),
    seen: tuple[int | None, ...] | None = None,
) -> bool:
    """Sleep until `due` (a window may close), a change in what is watched (an inbox file, a database write), or
    `until`. False when `until` came first: the tick should end. `seen`: what was watched when the caller last
    looked (taken before its listing), so that a change while it worked wakes this wait at once; by default what
    is watched now."""
    seen = watched_version(watch) if seen is None else seen
    while True:
        now = time.time()
        if now >= until:
            return False
        if (due is not None and now >= due) or (watch and watched_version(watch) != seen):
            return True
        time.sleep(max(0.0, min(HOLD_POLL_SECONDS, until - now, (due - now) if due is not None else until)))


def keep_holding(has_requests: bool, due: float | None, hold_until: float) -> bool:
    """Dagster's sensor daemon evaluates sensors every 5 s whatever their minimum interval, so a window closing
    just after a tick would wait up to 5 s for the next one. A tick therefore holds on (up to SENSOR_HOLD_SECONDS,
    watching) until it has a run to request, and then only lingers for a close due within HOLD_LINGER_SECONDS."""
    if not has_requests:
        return True
    return due is not None and due <= min(time.time() + HOLD_LINGER_SECONDS, hold_until)


def next_due(plan: WindowPlan, delay: float) -> float | None:
    """When to plan again even if nothing new is seen: the plan's next change, once the write delay has passed."""
    return plan.next_change + delay if plan.next_change is not None else None
