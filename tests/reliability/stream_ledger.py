"""Where every detection of a stream ended: the accounting of #15 (lost 0, duplicates 0), shared by the load and
restart tests and bench/load_bench.py.

A detection of the stream is *stored* (a `detections` row), *quarantined* (its line in `quarantine`) or *lost*.
A stored one is *batched* (its batch_id names a recorded batch whose detection_ids hold it) or still waiting
(its window is open, or closed and not run yet). A *duplicate* is a detection listed by two batches, a batch row
whose detection_count disagrees with the detections pointing at it, or a batch assessed by more than one
successful run. Read-only: nothing here writes the database or the instance.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hsi_dagster.storage.db import connect
from hsi_dagster.synthetic.jsonl import write_jsonl
from hsi_dagster.synthetic.streams import DEFAULT_CAMERAS, simulate

# The normal rate (synthetic/streams.py): `simulate`'s default 40 scenario events an hour over its 5 cameras,
# ~33 detections an event (AVERAGE_DETECTIONS_PER_EVENT), i.e. 8 events = ~264 detections per camera and hour.
NORMAL_EVENTS_PER_CAMERA_HOUR = 40.0 / len(DEFAULT_CAMERAS)
WARMUP_SECONDS = 300.0  # events last minutes: start the simulation early so the stream is at its rate at once


def cameras(count: int) -> tuple[str, ...]:
    """`count` camera ids outside the simulator's named ones, so every scenario can happen on every camera."""
    return tuple(f"cam{n:02d}" for n in range(1, count + 1))


def _utc(record: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(record["ts"].replace("Z", "+00:00")).astimezone(UTC)


def stream_records(
    seed: int, camera_ids: tuple[str, ...], factor: float, start: datetime, seconds: float
) -> list[dict[str, Any]]:
    """The detections of `seconds` of a seeded stream from `start`, at `factor` x the normal rate per camera."""
    events_per_hour = NORMAL_EVENTS_PER_CAMERA_HOUR * factor * len(camera_ids)
    records = simulate(
        seed,
        start=start - timedelta(seconds=WARMUP_SECONDS),
        duration_s=seconds + WARMUP_SECONDS,
        cameras=camera_ids,
        events_per_hour=events_per_hour,
    )
    return [record for record in records if _utc(record) >= start]


def per_second(records: list[dict[str, Any]], start: datetime, seconds: int) -> list[list[dict[str, Any]]]:
    """The records cut into one list per second of the stream (what a camera gateway writes as one file)."""
    chunks: list[list[dict[str, Any]]] = [[] for _ in range(seconds)]
    for record in records:
        index = int((_utc(record) - start).total_seconds())
        if 0 <= index < seconds:
            chunks[index].append(record)
    return chunks


def write_file(inbox: Path, name: str, lines: Iterable[dict[str, Any] | bytes]) -> Path:
    """One inbox file, written under a hidden name and renamed (a watcher never sees half a file)."""
    target = inbox / name
    write_jsonl(target, lines)
    return target


@dataclass
class Ledger:
    """The accounting of one stream against one DuckDB file (and, optionally, the Dagster runs)."""

    detections_in: int
    bad_lines_in: int
    stored: int
    quarantined_valid: int  # valid detections of the stream sent to quarantine (a bound, say)
    quarantined_bad: int  # quarantine rows that are not detections of the stream
    lost: list[str]
    batched: int
    waiting: int  # stored, no batch yet: window open or not run yet
    batches: int
    assessments: int
    unassessed: list[str]
    duplicate_detections: list[str]  # in more than one batch
    count_mismatches: list[str]  # batch rows whose detection_count disagrees with the detections pointing at them
    extra_runs: dict[str, int] = field(default_factory=dict)  # partition -> successful runs beyond the first
    statuses: dict[str, int] = field(default_factory=dict)  # risk_assessments.status -> rows

    @property
    def quarantined(self) -> int:
        return self.quarantined_valid + self.quarantined_bad

    @property
    def duplicates(self) -> int:
        return len(self.duplicate_detections) + len(self.count_mismatches) + sum(self.extra_runs.values())

    def row(self) -> str:
        return (
            f"detections in {self.detections_in} (+{self.bad_lines_in} bad lines), stored {self.stored}, "
            f"batched {self.batched}, waiting {self.waiting}, batches {self.batches}, assessments "
            f"{self.assessments}, unassessed {len(self.unassessed)}, quarantined {self.quarantined}, "
            f"lost {len(self.lost)}, duplicates {self.duplicates}"
        )


def _quarantined_ids(raws: Iterable[str | None]) -> Iterator[str | None]:
    for raw in raws:
        try:
            record = json.loads(raw or "")
        except ValueError:
            yield None
            continue
        yield record.get("detection_id") if isinstance(record, dict) else None


def ledger(
    db_path: str | Path,
    stream_ids: Iterable[str],
    bad_lines_in: int = 0,
    successful_runs: Counter[str] | None = None,
) -> Ledger:
    """Account for every detection id of the stream in the database (read-only)."""
    wanted = set(stream_ids)
    with connect(db_path, read_only=True) as conn:
        stored = dict(conn.execute("SELECT detection_id, batch_id FROM detections").fetchall())
        batches = conn.execute("SELECT batch_id, detection_ids, detection_count FROM detection_batches").fetchall()
        assessed = dict(conn.execute("SELECT batch_id, status FROM risk_assessments").fetchall())
        quarantine = [raw for (raw,) in conn.execute("SELECT raw FROM quarantine").fetchall()]
    q_ids = list(_quarantined_ids(quarantine))
    quarantined_valid = {i for i in q_ids if i in wanted}
    listed: Counter[str] = Counter(i for _, ids, _ in batches for i in ids)
    pointing: Counter[str] = Counter(batch for batch in stored.values() if batch is not None)
    batch_ids = {batch_id for batch_id, _, _ in batches}
    return Ledger(
        detections_in=len(wanted),
        bad_lines_in=bad_lines_in,
        stored=len(wanted & stored.keys()),
        quarantined_valid=len(quarantined_valid),
        quarantined_bad=len(q_ids) - sum(1 for i in q_ids if i in wanted),
        lost=sorted(wanted - stored.keys() - quarantined_valid),
        batched=sum(1 for i in wanted if stored.get(i) in batch_ids and listed[i] >= 1),
        waiting=sum(1 for i in wanted if i in stored and stored[i] is None),
        batches=len(batches),
        assessments=len(assessed),
        unassessed=sorted(batch_ids - assessed.keys()),
        duplicate_detections=sorted(i for i, n in listed.items() if n > 1),
        count_mismatches=sorted(b for b, _, count in batches if pointing[b] != count),
        extra_runs={k: n - 1 for k, n in (successful_runs or Counter()).items() if n > 1},
        statuses=dict(Counter(assessed.values())),
    )


def successful_runs_per_partition(instance: Any, job_name: str | None = "batch_pipeline") -> Counter[str]:
    """Successful runs per batch partition, whoever launched them (of `job_name`, or of any job with None)."""
    import dagster as dg

    records = instance.get_run_records(filters=dg.RunsFilter(job_name=job_name, statuses=[dg.DagsterRunStatus.SUCCESS]))
    return Counter(r.dagster_run.tags.get("dagster/partition", "") for r in records)


def rss_kib(pid: int | str = "self") -> int:
    """Resident set size of a process in KiB (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0
