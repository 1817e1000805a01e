"""Dagster's run queue, checked every half second instead of at most once a second (issue #17, the live path).

`QueuedRunCoordinator` takes `dequeue_interval_seconds` as a whole number, and its daemon waits in 0.5 s steps until
the interval has passed since the start of its previous pass: at 1 s (the least), a run a sensor queued waited
0-1.5 s for the next pass (0.75-1.0 s median in `bench/live_bench.py`). This subclass accepts a fraction of a second
(0.5 at least: the daemon's own wait step). Everything else (pools with run granularity, tag limits, launches in
threads) is Dagster's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg

MIN_DEQUEUE_INTERVAL_SECONDS = 0.5  # the queue daemon waits in steps of this length (dagster._daemon.daemon)


class FrequentQueuedRunCoordinator(dg.QueuedRunCoordinator):
    """A QueuedRunCoordinator whose `dequeue_interval_seconds` may be a fraction of a second."""

    def __init__(self, *, dequeue_interval_seconds: float | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)  # the parent's interval (a whole number) keeps its default and is never read
        interval = 1.0 if dequeue_interval_seconds is None else float(dequeue_interval_seconds)
        if interval < MIN_DEQUEUE_INTERVAL_SECONDS:
            raise ValueError(
                f"run_coordinator config dequeue_interval_seconds is {interval}: it must be at least "
                f"{MIN_DEQUEUE_INTERVAL_SECONDS} (the queue daemon waits in steps of that length)"
            )
        self._interval_seconds = interval

    @property
    def dequeue_interval_seconds(self) -> float:  # type: ignore[override]  # the daemon takes any number
        return self._interval_seconds

    @classmethod
    def config_type(cls) -> dict[str, Any]:
        parent = super().config_type()
        assert isinstance(parent, Mapping), "QueuedRunCoordinator's config is a mapping of fields"
        fields = dict(parent)
        fields["dequeue_interval_seconds"] = dg.Field(
            float,
            is_required=False,
            description="Seconds between passes of the run queue daemon; fractions allowed, 0.5 at least.",
        )
        return fields
