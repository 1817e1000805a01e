"""`hsi metrics serve`: Prometheus metrics of the pipeline, read from DuckDB at each scrape.

Nothing here is set by a run process: runs are short-lived and nothing would scrape them. The exporter is the one
long-running process; it opens a read-only connection per scrape (`storage/metrics.py` holds the SQL), so its
figures are right whichever process did the work. llama-server's own `/metrics` (`--metrics`) is scraped beside
it for what only the server knows (slots busy, requests deferred, tokens per second).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import duckdb
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from hsi_dagster.core.intake.batching import BatchRules
from hsi_dagster.llm.options import short_model_name
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.metrics import (
    LATENCY_BUCKETS_SECONDS,
    UTILIZATION_BUCKETS,
    HistogramRow,
    PipelineFigures,
    read_pipeline_figures,
)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9464
# A scrape must answer within Prometheus's scrape timeout (10 s by default): wait this long for a writer's lock.
LOCK_WAIT_SECONDS = 5.0


def _histogram(
    name: str, documentation: str, label: str, bounds: tuple[float, ...], rows: list[HistogramRow]
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, documentation, labels=[label])
    for row in rows:
        buckets = [(f"{bound:g}", float(n)) for bound, n in zip(bounds, row.cumulative, strict=True)]
        buckets.append(("+Inf", float(row.count)))
        family.add_metric(list(row.labels), buckets, sum_value=row.total)
    return family


def metric_families(figures: PipelineFigures, now: datetime) -> list[Metric]:
    """The exposition of one snapshot (pure: figures in, metric families out)."""
    utilization = _histogram(
        "hsi_context_utilization_ratio",
        "Server-counted prompt tokens / prompt budget, one observation per assessed batch",
        "camera_id",
        UTILIZATION_BUCKETS,
        figures.utilization,
    )
    latency = _histogram(
        "hsi_llm_latency_seconds",
        "LLM time per assessed batch (all calls, repair included), by model alias",
        "model",
        LATENCY_BUCKETS_SECONDS,
        figures.latency,
    )
    assessments = CounterMetricFamily(
        "hsi_risk_assessments", "Stored risk assessments by status and risk level", labels=["status", "risk_level"]
    )
    for status, level, count in figures.assessments:
        assessments.add_metric([status, level], count)
    prompt_tokens = CounterMetricFamily(
        "hsi_llm_prompt_tokens", "Prompt tokens counted by the server, by model alias", labels=["model"]
    )
    cached_tokens = CounterMetricFamily(
        "hsi_llm_cached_prompt_tokens", "Prompt tokens served from the prompt cache, by model alias", labels=["model"]
    )
    completion_tokens = CounterMetricFamily(
        "hsi_llm_completion_tokens", "Generated tokens (repair calls included), by model alias", labels=["model"]
    )
    for totals in figures.tokens:
        prompt_tokens.add_metric([totals.model], totals.prompt)
        cached_tokens.add_metric([totals.model], totals.cached)
        completion_tokens.add_metric([totals.model], totals.completion)
    all_prompt = sum(t.prompt for t in figures.tokens)
    cached_share = GaugeMetricFamily(
        "hsi_cached_prompt_token_share",
        "Cached prompt tokens / prompt tokens, all assessments",
        value=(sum(t.cached for t in figures.tokens) / all_prompt) if all_prompt else 0.0,
    )
    sections = CounterMetricFamily(
        "hsi_prompt_sections_removed", "Prompt sections removed to fit the budget, by section", labels=["section"]
    )
    for section, count in figures.sections_removed:
        sections.add_metric([section], count)
    quarantined = CounterMetricFamily(
        "hsi_quarantined_records", "Input records sent to quarantine", value=figures.quarantined
    )
    cut = CounterMetricFamily(
        "hsi_detections_cut_to_bounds",
        "Detections loaded with optional enrichment cut to an INGEST_* bound (listed in detections.enrichment_cuts)",
        value=figures.detections_cut,
    )
    degraded = CounterMetricFamily(
        "hsi_prompt_degradation_steps",
        "Prompts degraded past the section removals to fit their slot, by step (budget.py DEGRADATION_ORDER)",
        labels=["step"],
    )
    for step, count in figures.prompt_degradation:
        degraded.add_metric([step], count)
    closed = CounterMetricFamily(
        "hsi_closed_batches", "Closed batch windows (recorded or waiting to be), by close reason", labels=["reason"]
    )
    for reason, count in sorted(figures.closed_batches.items()):
        closed.add_metric([reason], count)
    waiting = GaugeMetricFamily(
        "hsi_batches_waiting",
        "Closed batches without an assessment: not recorded yet (unrecorded) or recorded (unassessed)",
        labels=["stage"],
    )
    waiting.add_metric(["unrecorded"], figures.waiting_unrecorded)
    waiting.add_metric(["unassessed"], figures.waiting_unassessed)
    oldest = figures.oldest_waiting_closed_at
    age = GaugeMetricFamily(
        "hsi_oldest_unassessed_batch_age_seconds",
        "Seconds since the oldest closed batch without an assessment closed (0 when none waits)",
        value=max(0.0, (now - oldest).total_seconds()) if oldest is not None else 0.0,
    )
    return [
        utilization,
        latency,
        assessments,
        prompt_tokens,
        cached_tokens,
        completion_tokens,
        cached_share,
        sections,
        quarantined,
        cut,
        degraded,
        closed,
        waiting,
        age,
    ]


class DuckDBMetricsCollector(Collector):
    """Reads the pipeline tables read-only at scrape time; `hsi_database_readable` says whether that worked."""

    def __init__(
        self,
        db_path: str,
        rules: BatchRules | None = None,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        lock_wait_seconds: float = LOCK_WAIT_SECONDS,
    ):
        self.db_path = db_path
        self.rules = rules or BatchRules()
        self.clock = clock
        self.lock_wait_seconds = lock_wait_seconds

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        now = self.clock()
        figures: PipelineFigures | None = PipelineFigures()  # a fresh installation: nothing ingested, all zero
        if Path(self.db_path).exists():
            try:
                with connect(self.db_path, read_only=True, wait_seconds=self.lock_wait_seconds) as conn:
                    figures = read_pipeline_figures(conn, self.rules, now, model_name=short_model_name)
            except duckdb.Error as exc:
                # Publish nothing rather than zeros: a counter that drops to 0 reads as a reset to Prometheus.
                print(f"hsi metrics: cannot read {self.db_path}: {exc}", file=sys.stderr, flush=True)
                figures = None
        yield GaugeMetricFamily(
            "hsi_database_readable",
            "1 when this scrape read the DuckDB file (or it does not exist yet), 0 when reading it failed",
            value=0 if figures is None else 1,
        )
        if figures is not None:
            yield from metric_families(figures, now)
        yield GaugeMetricFamily(
            "hsi_metrics_read_seconds", "Time this scrape spent reading DuckDB", value=time.perf_counter() - started
        )


def duckdb_registry(db_path: str, rules: BatchRules | None = None, **collector_options) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(DuckDBMetricsCollector(db_path, rules, **collector_options))
    return registry


def serve(db_path: str, rules: BatchRules, *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
    """Serve /metrics until the process is stopped (SIGTERM/SIGINT)."""
    from prometheus_client import start_http_server

    server, thread = start_http_server(port, addr=host, registry=duckdb_registry(db_path, rules))
    # Handlers of our own: a process started by one that ignores SIGTERM (a supervisor, a test runner) inherits
    # SIG_IGN, and would then outlive its stop (seen in the test suite: still serving 60 s after SIGTERM).
    stopping = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopping.set())
    print(f"metrics of {db_path} at http://{host}:{server.server_port}/metrics", flush=True)
    try:
        while thread.is_alive() and not stopping.wait(1.0):
            pass
    finally:
        server.shutdown()
