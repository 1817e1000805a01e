"""Which batches to run now and which to try again: ONE pure policy for the batch-window sensor and `hsi process`.

A candidate is a closed window not yet recorded, or a recorded batch with no stored assessment. For each,
`choose_batches` decides from what is known of its earlier attempts (`BatchHistory`):

- a run queued or in progress: left alone;
- no failed attempt yet: requested at once (attempt 1), except a recorded batch of which no run is known at all
  (recorded by a run this history does not hold, which may still be going): it waits `grace_seconds` after its
  recording. A successful run ends a series: if the assessment is missing afterwards (rows deleted to run the
  batch again, a run of only some of the assets), the batch starts again at attempt 1;
- `max_attempts` failed attempts and still no assessment: abandoned (left for an operator; the runs say why);
- otherwise attempt n+1 once `grace_seconds * 2**(n-1)` have passed since attempt n was requested or, if its run
  ended, since it ended.

Run keys number the runs of a batch, whatever their outcome: the first is the batch id, the next
`batch_id#retry1`, ..., so Dagster never dedupes a new request away.

The same rule holds whether the batch was recorded or not: a run that failed before `detection_batches` recorded
its window leaves the window closed and unrecorded, and it is requested again like any other failed batch.

Where the history comes from: the Dagster instance's runs of the batch's partition, whoever launched them (the
sensor, `hsi process`, the UI); see `history_from_runs`. The sensor adds its cursor (`WindowCursor`), which holds
the requests of its own ticks that may not be runs yet; `plan_tick` merges both and returns the next cursor.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

RETRY_GRACE_SECONDS = 600.0  # a run that started this long ago and stored nothing has failed or stalled
MAX_ATTEMPTS = 5


@dataclass(frozen=True)
class Candidate:
    batch_id: str
    recorded_at: float | None = None  # epoch seconds when detection_batches recorded it; None = closed, unrecorded


@dataclass(frozen=True)
class BatchHistory:
    """What is known of a batch's earlier attempts."""

    attempts: int = 0  # failed (or cancelled) runs since the last successful one, or requests made
    last_attempt_at: float | None = None  # epoch seconds: latest request, or the end of its run when it ended
    running: bool = False  # a run of the batch is queued or in progress
    runs: int = 0  # runs known of the batch, any outcome (numbers the next run key)


@dataclass(frozen=True)
class PastRun:
    """One run of a batch's partition, as the instance records it."""

    batch_id: str
    created_at: float
    ended_at: float | None  # None while queued or in progress
    succeeded: bool = False


@dataclass(frozen=True)
class Request:
    batch_id: str
    run_key: str
    attempt: int  # 1 = first request (since the last successful run)
    run: int = 1  # the run's number among all runs of the batch (what the key is made of)


@dataclass(frozen=True)
class BatchChoice:
    requests: list[Request]
    waiting: dict[str, float]  # batch_id -> epoch seconds when it may be requested again
    running: list[str]  # a run is queued or in progress
    abandoned: list[str]  # max_attempts used and still no assessment
    deferred: int  # would be requested now but over the cap; first in line next time


def run_key(batch_id: str, run: int) -> str:
    """The first run of a batch is keyed by the batch id alone (one run per closed window); later ones by number."""
    return batch_id if run == 1 else f"{batch_id}#retry{run - 1}"


def history_from_runs(runs: Iterable[PastRun]) -> dict[str, BatchHistory]:
    """Per batch: the runs that ended without success since its last successful run are its attempts."""
    grouped: dict[str, list[PastRun]] = {}
    for run in runs:
        grouped.setdefault(run.batch_id, []).append(run)
    history = {}
    for batch_id, batch_runs in grouped.items():
        batch_runs.sort(key=lambda run: run.created_at)
        last_success = max((i for i, run in enumerate(batch_runs) if run.succeeded), default=-1)
        failed = [
            run.ended_at for run in batch_runs[last_success + 1 :] if run.ended_at is not None and not run.succeeded
        ]
        history[batch_id] = BatchHistory(
            attempts=len(failed),
            last_attempt_at=max(failed, default=None),
            running=any(run.ended_at is None for run in batch_runs),
            runs=len(batch_runs),
        )
    return history


def merge_history(a: BatchHistory | None, b: BatchHistory | None) -> BatchHistory:
    """Two views of one batch (the instance's runs, a sensor's own requests): the most attempts, the latest time."""
    if a is None or b is None:
        return a or b or BatchHistory()
    times = [t for t in (a.last_attempt_at, b.last_attempt_at) if t is not None]
    return BatchHistory(
        max(a.attempts, b.attempts), max(times) if times else None, a.running or b.running, max(a.runs, b.runs)
    )


def choose_batches(
    candidates: Sequence[Candidate],
    history: Mapping[str, BatchHistory],
    now: float,
    *,
    cap: int | None = None,
    grace_seconds: float = RETRY_GRACE_SECONDS,
    max_attempts: int = MAX_ATTEMPTS,
) -> BatchChoice:
    """The rules of the module docstring, over `candidates` in the order given (oldest first), at most `cap`
    requests (None = no cap)."""
    requests: list[Request] = []
    waiting: dict[str, float] = {}
    running: list[str] = []
    abandoned: list[str] = []
    deferred = 0
    for candidate in candidates:
        past = history.get(candidate.batch_id, BatchHistory())
        if past.running:
            running.append(candidate.batch_id)
            continue
        if past.attempts >= max_attempts:
            abandoned.append(candidate.batch_id)
            continue
        due = due_at(past, grace_seconds)
        if due is None:  # no failed attempt yet
            due = now
            if candidate.recorded_at is not None and past.runs == 0:  # recorded by a run this history does not hold
                due = candidate.recorded_at + grace_seconds
        if now < due:
            waiting[candidate.batch_id] = due
            continue
        if cap is not None and len(requests) >= cap:
            deferred += 1
            continue
        attempt, run = past.attempts + 1, max(past.runs, past.attempts) + 1
        requests.append(Request(candidate.batch_id, run_key(candidate.batch_id, run), attempt, run))
    return BatchChoice(requests, waiting, running, abandoned, deferred)


def candidates_in_order(closed: Sequence[str], unassessed: Mapping[str, float]) -> list[Candidate]:
    """Closed windows not yet recorded (in the order given, oldest first), then recorded batches without an
    assessment, oldest recording first."""
    unrecorded = [Candidate(batch_id) for batch_id in closed if batch_id not in unassessed]
    recorded = [Candidate(b, at) for b, at in sorted(unassessed.items(), key=lambda item: (item[1], item[0]))]
    return unrecorded + recorded


# ------------------------------------------------------------------------------------------- the sensor's state
@dataclass
class WindowCursor:
    """The sensor's own requests (batch_id -> [attempt, epoch seconds requested, run number]) for batches still
    without an assessment, and the batches it already reported abandoned (so it says so once)."""

    requested: dict[str, list[float]] = field(default_factory=dict)
    abandoned: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, text: str | None, *, grace_seconds: float = RETRY_GRACE_SECONDS) -> WindowCursor:
        if not text:
            return cls()
        data = json.loads(text)
        requested = {key: [float(v) for v in value] for key, value in data.get("requested", {}).items()}
        abandoned = list(data.get("abandoned", []))
        # Cursors written before this module: in_flight = batch_id -> [attempts, epoch seconds of the next retry].
        for key, (attempts, retry_at) in data.get("in_flight", {}).items():
            if retry_at == float("inf"):  # given up at attempts - 1 (then the marker added one)
                requested[key] = [float(attempts) - 1, 0.0]
                abandoned.append(key)
            else:
                requested[key] = [float(attempts), float(retry_at) - grace_seconds * 2 ** max(0, attempts - 1)]
        return cls(requested, abandoned)

    def to_json(self) -> str:
        return json.dumps(
            {"requested": self.requested, "abandoned": sorted(self.abandoned)}, sort_keys=True, separators=(",", ":")
        )

    def history(self) -> dict[str, BatchHistory]:
        return {
            key: BatchHistory(int(value[0]), value[1], runs=int(value[2] if len(value) > 2 else value[0]))
            for key, value in self.requested.items()
        }


@dataclass(frozen=True)
class TickPlan:
    requests: list[Request]
    new_partitions: list[str]  # requested windows not recorded yet (adding a known partition is a no-op)
    cursor: WindowCursor
    deferred: int  # left for the next tick by the per-tick cap
    abandoned: list[str]  # newly given up this tick (to report once)


def due_at(history: BatchHistory, grace_seconds: float) -> float | None:
    """When attempt n+1 may be requested after n attempts (None: no attempt yet)."""
    if history.attempts == 0 or history.last_attempt_at is None:
        return None
    return history.last_attempt_at + grace_seconds * 2 ** (history.attempts - 1)


def plan_tick(
    cursor: WindowCursor,
    closed: list[str],
    unassessed: dict[str, float],
    now: float,
    *,
    cap: int,
    runs: Callable[[list[str]], Mapping[str, BatchHistory]] | None = None,
    grace_seconds: float = RETRY_GRACE_SECONDS,
    max_attempts: int = MAX_ATTEMPTS,
) -> TickPlan:
    """One sensor tick. `closed`: closed windows not yet recorded, oldest first; `unassessed`: recorded batches with
    no stored assessment -> epoch seconds when recorded; `runs`: the instance's run history of the batches it is
    given (None: the cursor alone). Returns the run requests of this tick and the next cursor (only batches still
    without an assessment).

    `runs` is asked only about batches whose state it could change: not those already given up, nor those whose
    last request by this sensor is still within its back-off (more runs could only make them wait longer). So a
    tick's run-storage query stays small however many batches are waiting or were given up.
    """
    live = set(closed) | set(unassessed)
    mine = {key: value for key, value in cursor.requested.items() if key in live}
    own = WindowCursor(mine).history()
    given_up = set(cursor.abandoned) & live
    candidates = candidates_in_order(closed, unassessed)
    settled = given_up | {key for key, past in own.items() if (due_at(past, grace_seconds) or 0.0) > now}
    found = runs([c.batch_id for c in candidates if c.batch_id not in settled]) if runs else {}
    history = {key: merge_history(found.get(key), own.get(key)) for key in live}
    for key in given_up:
        past = history[key]
        history[key] = BatchHistory(max(past.attempts, max_attempts), past.last_attempt_at, past.running)
    choice = choose_batches(candidates, history, now, cap=cap, grace_seconds=grace_seconds, max_attempts=max_attempts)
    for request in choice.requests:
        mine[request.batch_id] = [float(request.attempt), now, float(request.run)]
    reported = set(cursor.abandoned)
    unrecorded = set(closed) - set(unassessed)
    return TickPlan(
        requests=choice.requests,
        new_partitions=[r.batch_id for r in choice.requests if r.batch_id in unrecorded],
        cursor=WindowCursor(mine, sorted(set(choice.abandoned))),
        deferred=choice.deferred,
        abandoned=[batch_id for batch_id in choice.abandoned if batch_id not in reported],
    )
