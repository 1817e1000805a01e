"""Prometheus metrics: `hsi_context_utilization_ratio` and friends.

Steps set the gauges of their own process; `hsi metrics serve` exposes figures computed from DuckDB at each
scrape, so they are right whichever process (CLI, daemon-launched run) did the work.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

CONTEXT_UTILIZATION = Gauge(
    "hsi_context_utilization_ratio", "Prompt tokens / prompt budget of the latest budgeted prompt", ["camera_id"]
)


class DuckDBMetricsCollector(Collector):
    """Reads the pipeline tables read-only at scrape time."""

    def __init__(self, db_path: str):
        self.db_path = db_path

    def collect(self) -> Iterator:
        from hsi_dagster.storage.db import connect

        utilization = GaugeMetricFamily(
            "hsi_context_utilization_ratio",
            "Prompt tokens / prompt budget of the latest assessment per camera",
            labels=["camera_id"],
        )
        assessments = CounterMetricFamily(
            "hsi_risk_assessments", "Stored risk assessments", labels=["status", "risk_level"]
        )
        quarantined = CounterMetricFamily("hsi_quarantined_records", "Input records sent to quarantine")
        cached = GaugeMetricFamily(
            "hsi_cached_prompt_token_share", "Cached prompt tokens / prompt tokens, all assessments"
        )
        with connect(self.db_path, read_only=True) as conn:
            for camera_id, value in conn.execute(
                "SELECT camera_id, arg_max(context_utilization, assessed_at) FROM risk_assessments"
                " WHERE context_utilization IS NOT NULL GROUP BY camera_id ORDER BY camera_id"
            ).fetchall():
                utilization.add_metric([camera_id], float(value))
            for status, level, count in conn.execute(
                "SELECT status, coalesce(risk_level, 'none'), count(*) FROM risk_assessments GROUP BY ALL ORDER BY ALL"
            ).fetchall():
                assessments.add_metric([status, level], count)
            quarantined.add_metric([], conn.execute("SELECT count(*) FROM quarantine").fetchone()[0])
            share = conn.execute(
                "SELECT sum(cached_tokens)::DOUBLE / nullif(sum(prompt_tokens), 0) FROM risk_assessments"
            ).fetchone()[0]
            cached.add_metric([], float(share or 0.0))
        yield from (utilization, assessments, quarantined, cached)


def duckdb_registry(db_path: str) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(DuckDBMetricsCollector(db_path))
    return registry
