"""The reads behind `hsi metrics serve`: every figure the exporter publishes, computed from DuckDB in one snapshot.

Counts come from the stored rows, not from counters kept in a run process, so they are right whichever process
(`hsi process`, a daemon-launched run container) did the work, and survive restarts. Histograms are computed in
SQL (one pass per table), so a scrape costs the same with ten rows or a million.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import duckdb

from hsi_dagster.core.intake.batching import BatchRules
from hsi_dagster.storage.batches import pending_closed_batches

# Upper bounds of the histogram buckets (the +Inf bucket is implied). 0.8 is the budget's warning threshold.
UTILIZATION_BUCKETS: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
LATENCY_BUCKETS_SECONDS: tuple[float, ...] = (0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)


@dataclass(frozen=True)
class HistogramRow:
    """One labelled histogram: cumulative counts per upper bound (same order as the buckets), sum and count."""

    labels: tuple[str, ...]
    cumulative: tuple[int, ...]
    total: float
    count: int


@dataclass(frozen=True)
class TokenTotals:
    model: str
    prompt: int
    cached: int
    completion: int


@dataclass
class PipelineFigures:
    """A consistent snapshot of the pipeline tables (one read-only connection)."""

    utilization: list[HistogramRow] = field(default_factory=list)  # labels: (camera_id,)
    latency: list[HistogramRow] = field(default_factory=list)  # labels: (model,)
    assessments: list[tuple[str, str, int]] = field(default_factory=list)  # (status, risk_level, count)
    tokens: list[TokenTotals] = field(default_factory=list)
    sections_removed: list[tuple[str, int]] = field(default_factory=list)
    quarantined: int = 0
    detections_cut: int = 0  # loaded with optional enrichment cut to a bound (contract section 6)
    prompt_degradation: list[tuple[str, int]] = field(default_factory=list)  # (step, prompts) past the removals
    closed_batches: dict[str, int] = field(default_factory=dict)  # close_reason -> recorded + pending
    waiting_unrecorded: int = 0
    waiting_unassessed: int = 0
    oldest_waiting_closed_at: datetime | None = None


def _histograms(
    conn: duckdb.DuckDBPyConnection, value_sql: str, label_sql: str, table: str, bounds: Sequence[float]
) -> list[HistogramRow]:
    """Cumulative bucket counts per label in one aggregate query; `value_sql`/`label_sql` are fixed expressions."""
    buckets = ", ".join(f"count(*) FILTER (WHERE {value_sql} <= ?)" for _ in bounds)
    rows = conn.execute(
        f"SELECT {label_sql} AS label, {buckets}, sum({value_sql}), count(*) FROM {table}"
        f" WHERE {value_sql} IS NOT NULL GROUP BY label ORDER BY label",
        list(bounds),
    ).fetchall()
    return [
        HistogramRow(
            labels=(str(row[0]),),
            cumulative=tuple(int(n) for n in row[1 : 1 + len(bounds)]),
            total=float(row[-2] or 0.0),
            count=int(row[-1]),
        )
        for row in rows
    ]


def _counts_by(conn: duckdb.DuckDBPyConnection, rows_sql: str) -> list[tuple[str, int]]:
    """(name, how many rows have it) in name order; `rows_sql` is a fixed SELECT whose rows have a `name` column."""
    return [
        (str(name), int(count))
        for name, count in conn.execute(
            f"SELECT name, count(*) FROM ({rows_sql}) GROUP BY name ORDER BY name"
        ).fetchall()
    ]


def _waiting_recorded(conn: duckdb.DuckDBPyConnection) -> tuple[int, datetime | None]:
    """Recorded batches without any stored assessment: how many, and the earliest close time among them."""
    count, oldest = conn.execute(
        "SELECT count(*), min(b.closes_at) FROM detection_batches b"
        " ANTI JOIN risk_assessments r ON r.batch_id = b.batch_id"
    ).fetchone()  # type: ignore[misc]
    return int(count), oldest.astimezone(UTC) if oldest is not None else None


def read_pipeline_figures(
    conn: duckdb.DuckDBPyConnection,
    rules: BatchRules,
    now: datetime,
    *,
    model_name: Callable[[str], str] = str,
) -> PipelineFigures:
    """Everything the exporter publishes. `model_name` maps a stored model name to its short alias."""
    figures = PipelineFigures()
    figures.utilization = _histograms(conn, "context_utilization", "camera_id", "risk_assessments", UTILIZATION_BUCKETS)
    latency_by_stored_name = _histograms(
        conn, "latency_ms / 1000.0", "coalesce(model, 'unknown')", "risk_assessments", LATENCY_BUCKETS_SECONDS
    )
    figures.latency = _merge_histograms(latency_by_stored_name, model_name)
    figures.assessments = [
        (str(status), str(level), int(count))
        for status, level, count in conn.execute(
            "SELECT status, coalesce(risk_level, 'none'), count(*) FROM risk_assessments GROUP BY ALL ORDER BY ALL"
        ).fetchall()
    ]
    tokens: dict[str, list[int]] = {}
    for model, prompt, cached, completion in conn.execute(
        "SELECT coalesce(model, 'unknown'), coalesce(sum(prompt_tokens), 0), coalesce(sum(cached_tokens), 0),"
        " coalesce(sum(completion_tokens), 0) FROM risk_assessments"
        " WHERE coalesce(prompt_tokens, cached_tokens, completion_tokens) IS NOT NULL GROUP BY ALL ORDER BY ALL"
    ).fetchall():
        totals = tokens.setdefault(model_name(str(model)), [0, 0, 0])
        totals[0] += int(prompt)
        totals[1] += int(cached)
        totals[2] += int(completion)
    figures.tokens = [TokenTotals(model, *totals) for model, totals in sorted(tokens.items())]
    figures.sections_removed = _counts_by(
        conn,
        "SELECT unnest(sections_removed) AS name FROM budgeted_prompts",  # one row per section cut
    )
    figures.quarantined = int(conn.execute("SELECT count(*) FROM quarantine").fetchone()[0])  # type: ignore[index]
    if _has_column(conn, "detections", "enrichment_cuts"):  # a database not migrated to version 5 has neither
        figures.detections_cut = int(
            conn.execute("SELECT count(*) FROM detections WHERE enrichment_cuts IS NOT NULL").fetchone()[0]  # type: ignore[index]
        )
    if _has_column(conn, "budgeted_prompts", "prompt_degraded"):
        figures.prompt_degradation = _counts_by(
            conn,
            "SELECT unnest(prompt_degraded) AS name FROM budgeted_prompts",  # one row per degradation step
        )
    figures.closed_batches = dict(_counts_by(conn, "SELECT close_reason AS name FROM detection_batches"))
    figures.waiting_unassessed, oldest_recorded = _waiting_recorded(conn)
    # Closed windows the sensor has not recorded yet: they wait too, and count as closed.
    pending = pending_closed_batches(conn, rules, now)
    for batch in pending:
        figures.closed_batches[batch.close_reason] = figures.closed_batches.get(batch.close_reason, 0) + 1
    figures.waiting_unrecorded = len(pending)
    candidates = [t for t in (oldest_recorded, min((b.closes_at for b in pending), default=None)) if t is not None]
    figures.oldest_waiting_closed_at = min(candidates) if candidates else None
    return figures


def _has_column(conn: duckdb.DuckDBPyConnection, table: str, column: str) -> bool:
    return (
        conn.execute(
            "SELECT 1 FROM information_schema.columns WHERE table_name = ? AND column_name = ?", [table, column]
        ).fetchone()
        is not None
    )


def _merge_histograms(rows: list[HistogramRow], rename: Callable[[str], str]) -> list[HistogramRow]:
    """Rows whose labels map to the same short name (a path and its alias) become one."""
    merged: dict[tuple[str, ...], HistogramRow] = {}
    for row in rows:
        labels = tuple(rename(label) for label in row.labels)
        seen = merged.get(labels)
        merged[labels] = (
            HistogramRow(labels, row.cumulative, row.total, row.count)
            if seen is None
            else HistogramRow(
                labels,
                tuple(a + b for a, b in zip(seen.cumulative, row.cumulative, strict=True)),
                seen.total + row.total,
                seen.count + row.count,
            )
        )
    return [merged[key] for key in sorted(merged)]
