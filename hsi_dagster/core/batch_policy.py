"""The batch-window sensor's bookkeeping, as a pure function: which batches to request this tick.

A batch is requested once when its window closes (run_key = batch_id). If its run fails and no assessment is
stored, it is requested again after a back-off (run_key = `batch_id#retryN`), up to MAX_ATTEMPTS. The cursor only
holds batches still in flight, so it stays small: a batch leaves it once it has an assessment.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

RETRY_GRACE_SECONDS = 600.0  # a run that started this long ago and stored nothing has failed or stalled
MAX_ATTEMPTS = 5


@dataclass
class WindowCursor:
    # batch_id -> [attempts so far, epoch seconds after which another attempt may be requested]
    in_flight: dict[str, list[float]] = field(default_factory=dict)

    @classmethod
    def from_json(cls, text: str | None) -> WindowCursor:
        if not text:
            return cls()
        data = json.loads(text)
        return cls(in_flight={key: [float(a), float(b)] for key, (a, b) in data.get("in_flight", {}).items()})

    def to_json(self) -> str:
        return json.dumps({"in_flight": self.in_flight}, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Request:
    batch_id: str
    run_key: str
    attempt: int  # 1 = first request


@dataclass(frozen=True)
class TickPlan:
    requests: list[Request]
    new_partitions: list[str]
    cursor: WindowCursor
    deferred: int  # closed batches left for the next tick by the per-tick cap
    abandoned: list[str]


def plan_tick(
    cursor: WindowCursor,
    closed: list[str],
    unassessed: dict[str, float],
    now: float,
    *,
    cap: int,
    grace_seconds: float = RETRY_GRACE_SECONDS,
    max_attempts: int = MAX_ATTEMPTS,
) -> TickPlan:
    """`closed`: closed windows not yet recorded, oldest first; `unassessed`: recorded batches with no stored
    assessment -> epoch seconds when recorded. Returns the run requests of this tick and the next cursor."""
    in_flight = {key: list(value) for key, value in cursor.in_flight.items()}
    live = set(closed) | set(unassessed)
    for batch_id in list(in_flight):
        if batch_id not in live:  # assessed: done
            del in_flight[batch_id]
    requests: list[Request] = []
    new_partitions: list[str] = []
    abandoned: list[str] = []
    deferred = 0
    for batch_id in closed:
        if batch_id in in_flight:
            continue
        if len(requests) >= cap:
            deferred += 1
            continue
        requests.append(Request(batch_id, batch_id, 1))
        new_partitions.append(batch_id)
        in_flight[batch_id] = [1, now + grace_seconds]
    for batch_id, recorded_at in sorted(unassessed.items(), key=lambda item: item[1]):
        if len(requests) >= cap:
            break
        attempts, retry_at = in_flight.get(batch_id, [0, recorded_at + grace_seconds])
        if now < retry_at:
            in_flight.setdefault(batch_id, [attempts, retry_at])
            continue
        if attempts >= max_attempts:
            if attempts == max_attempts:
                abandoned.append(batch_id)
                in_flight[batch_id] = [attempts + 1, float("inf")]
            continue
        attempt = int(attempts) + 1
        run_key = batch_id if attempt == 1 else f"{batch_id}#retry{attempt - 1}"
        requests.append(Request(batch_id, run_key, attempt))
        in_flight[batch_id] = [attempt, now + grace_seconds * 2 ** (attempt - 1)]
    return TickPlan(requests, new_partitions, WindowCursor(in_flight), deferred, abandoned)
