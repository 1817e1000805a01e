"""Prometheus figures computed from DuckDB at scrape time (DuckDBMetricsCollector / duckdb_registry)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from hsi_dagster.cli.metrics import duckdb_registry
from hsi_dagster.storage.db import connect

T0 = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)

# (batch_id, camera_id, status, risk_level, prompt_tokens, cached_tokens, context_utilization, assessed_at offset s)
ROWS = [
    ("b1", "front_door", "ok", "low", 1000, 0, 0.30, 0),
    ("b3", "front_door", "ok", "high", 3000, 1500, 0.3125, 120),  # latest measured front_door value (not the max)
    ("b2", "front_door", "ok", "low", 2000, 1000, 0.55, 60),  # inserted after b3 but older
    ("b4", "front_door", "invalid_output", None, None, None, None, 180),  # newest, but nothing measured
    ("b5", "garage", "ok", "low", 1500, 500, 0.42, 30),
    ("b6", "garage", "invalid_output", None, 1500, 0, 0.47, 10),
    ("b7", "backyard", "llm_rejected", None, None, None, None, 5),  # no utilization at all
]


def _write(path: Path, rows=ROWS, quarantined: int = 3) -> None:
    with connect(path) as conn:
        for batch_id, camera, status, level, prompt, cached, util, offset in rows:
            conn.execute(
                "INSERT INTO risk_assessments (batch_id, camera_id, status, risk_level, prompt_tokens, cached_tokens,"
                " context_utilization, assessed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [batch_id, camera, status, level, prompt, cached, util, T0 + timedelta(seconds=offset)],
            )
        for line_no in range(1, quarantined + 1):
            conn.execute("INSERT INTO quarantine VALUES ('in.jsonl', ?, '{', 'not JSON', now())", [line_no])


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_latest_context_utilization_per_camera(tmp_path: Path) -> None:
    path = tmp_path / "hsi.duckdb"
    _write(path)
    text = generate_latest(duckdb_registry(str(path))).decode()
    assert 'hsi_context_utilization_ratio{camera_id="front_door"} 0.3125\n' in text
    assert 'hsi_context_utilization_ratio{camera_id="garage"} 0.42\n' in text
    assert not any(line.startswith('hsi_context_utilization_ratio{camera_id="backyard"}') for line in text.splitlines())


def test_counts_quarantine_and_cached_share(tmp_path: Path) -> None:
    path = tmp_path / "hsi.duckdb"
    _write(path)
    samples = _samples(generate_latest(duckdb_registry(str(path))).decode())
    counts = {labels: value for (name, labels), value in samples.items() if name == "hsi_risk_assessments_total"}
    assert counts == {
        (("risk_level", "high"), ("status", "ok")): 1,
        (("risk_level", "low"), ("status", "ok")): 3,
        (("risk_level", "none"), ("status", "invalid_output")): 2,
        (("risk_level", "none"), ("status", "llm_rejected")): 1,
    }
    assert samples[("hsi_quarantined_records_total", ())] == 3
    # cached / prompt tokens over all assessments: (0+1500+1000+500+0) / (1000+3000+2000+1500+1500)
    assert samples[("hsi_cached_prompt_token_share", ())] == pytest.approx(3000 / 9000)


def test_figures_are_read_at_each_scrape(tmp_path: Path) -> None:
    path = tmp_path / "hsi.duckdb"
    _write(path, rows=ROWS[:1], quarantined=0)
    registry = duckdb_registry(str(path))
    first = generate_latest(registry).decode()
    assert 'hsi_context_utilization_ratio{camera_id="front_door"} 0.3\n' in first
    assert "hsi_quarantined_records_total 0.0" in first
    _write(path, rows=ROWS[1:2], quarantined=2)
    second = generate_latest(registry).decode()
    assert 'hsi_context_utilization_ratio{camera_id="front_door"} 0.3125\n' in second
    assert "hsi_quarantined_records_total 2.0" in second


def test_empty_database_gives_zeros_not_errors(tmp_path: Path) -> None:
    path = tmp_path / "hsi.duckdb"
    _write(path, rows=[], quarantined=0)
    samples = _samples(generate_latest(duckdb_registry(str(path))).decode())
    assert samples[("hsi_cached_prompt_token_share", ())] == 0.0
    assert samples[("hsi_quarantined_records_total", ())] == 0
    assert not any(name.startswith("hsi_context_utilization_ratio") for name, _ in samples)


def test_scrape_while_this_process_holds_a_write_connection(tmp_path: Path) -> None:
    path = tmp_path / "hsi.duckdb"
    _write(path)
    with connect(path) as writer:
        writer.execute("INSERT INTO quarantine VALUES ('in.jsonl', 99, '{', 'not JSON', now())")
        text = generate_latest(duckdb_registry(str(path))).decode()
    assert "hsi_quarantined_records_total 4.0" in text
