"""`hsi metrics serve`: every family computed from real DuckDB rows at scrape time (DuckDBMetricsCollector)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from hsi_dagster.cli.main import build_parser
from hsi_dagster.cli.metrics import duckdb_registry
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.metrics import LATENCY_BUCKETS_SECONDS, UTILIZATION_BUCKETS
from tests.support.exporter import listening_addresses, running_exporter
from tests.support.observability_data import MODEL_ALIAS, ProcessedSet, build_processed_set

NOW = datetime(2026, 11, 16, 12, 0, tzinfo=UTC)
T0 = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def processed(tmp_path_factory: pytest.TempPathFactory) -> ProcessedSet:
    return build_processed_set(tmp_path_factory.mktemp("metrics") / "hsi.duckdb", as_of=NOW)


def scrape(path: Path, now: datetime = NOW) -> str:
    return generate_latest(duckdb_registry(str(path), clock=lambda: now)).decode()


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def of(found: dict, name: str) -> dict[tuple, float]:
    return {labels: value for (sample, labels), value in found.items() if sample == name}


def test_context_utilization_histogram_holds_every_assessed_batch_per_camera(processed: ProcessedSet) -> None:
    found = samples(scrape(processed.db_path))
    by_camera = processed.utilization_by_camera()
    assert set(by_camera) == {"front_door", "garage", "backyard"}
    for camera, values in by_camera.items():
        assert found[("hsi_context_utilization_ratio_count", (("camera_id", camera),))] == len(values)
        assert found[("hsi_context_utilization_ratio_sum", (("camera_id", camera),))] == pytest.approx(sum(values))
        for bound in UTILIZATION_BUCKETS:
            key = ("hsi_context_utilization_ratio_bucket", (("camera_id", camera), ("le", f"{bound:g}")))
            assert found[key] == sum(1 for v in values if v <= bound), (camera, bound)
        inf = ("hsi_context_utilization_ratio_bucket", (("camera_id", camera), ("le", "+Inf")))
        assert found[inf] == len(values)
    # the rejected prompt has no server count: it is not an observation
    assert sum(len(v) for v in by_camera.values()) == len(processed.status_of) - 1


def test_assessments_by_status_and_level(processed: ProcessedSet) -> None:
    counts = of(samples(scrape(processed.db_path)), "hsi_risk_assessments_total")
    expected: Counter = Counter()
    for batch_id, status in processed.status_of.items():
        score = processed.score_of.get(batch_id)
        level = (
            "none"
            if score is None
            else "low"
            if score < 30
            else "medium"
            if score < 60
            else "high"
            if score < 85
            else "critical"
        )
        expected[(("risk_level", level), ("status", status))] += 1
    assert counts == dict(expected)
    assert {labels[0][1] for labels in counts} == {"low", "medium", "high", "critical", "none"}


def test_tokens_and_latency_name_the_model_by_its_alias(processed: ProcessedSet) -> None:
    found = samples(scrape(processed.db_path))
    model = (("model", MODEL_ALIAS),)
    for name, values in (
        ("hsi_llm_prompt_tokens_total", processed.prompt_tokens),
        ("hsi_llm_cached_prompt_tokens_total", processed.cached_tokens),
        ("hsi_llm_completion_tokens_total", processed.completion_tokens),
    ):
        assert of(found, name) == {model: sum(values.values())}, name  # rows named by a path merge into the alias
    seconds = [ms / 1000 for ms in processed.latency_ms.values()]
    assert found[("hsi_llm_latency_seconds_count", model)] == len(seconds)
    assert found[("hsi_llm_latency_seconds_sum", model)] == pytest.approx(sum(seconds))
    for bound in LATENCY_BUCKETS_SECONDS:
        key = ("hsi_llm_latency_seconds_bucket", (("le", f"{bound:g}"), ("model", MODEL_ALIAS)))
        assert found[key] == sum(1 for s in seconds if s <= bound), bound
    share = sum(processed.cached_tokens.values()) / sum(processed.prompt_tokens.values())
    assert found[("hsi_cached_prompt_token_share", ())] == pytest.approx(share)
    assert not any("gguf" in str(labels) or "/" in str(labels) for labels in of(found, "hsi_llm_prompt_tokens_total"))


def test_removed_sections_by_name(processed: ProcessedSet) -> None:
    removed = of(samples(scrape(processed.db_path)), "hsi_prompt_sections_removed_total")
    expected = Counter(section for sections in processed.sections_removed.values() for section in sections)
    assert removed == {(("section", section),): count for section, count in expected.items()}
    assert set(expected) == {"depth", "pose"}


def test_closed_batches_waiting_and_age_of_the_oldest(processed: ProcessedSet) -> None:
    found = samples(scrape(processed.db_path))
    reasons = Counter(processed.close_reasons.values())
    assert of(found, "hsi_closed_batches_total") == {(("reason", r),): n for r, n in reasons.items()}
    assert set(reasons) == {"idle", "window", "fast_path"}
    assert of(found, "hsi_batches_waiting") == {
        (("stage", "unrecorded"),): len(processed.unrecorded),
        (("stage", "unassessed"),): len(processed.unassessed),
    }
    oldest = min(processed.closes_at[b] for b in processed.unrecorded + processed.unassessed)
    assert found[("hsi_oldest_unassessed_batch_age_seconds", ())] == pytest.approx((NOW - oldest).total_seconds())
    assert found[("hsi_database_readable", ())] == 1
    # Before any window closed, nothing waits and the age is 0 (not the age of an open window).
    early = samples(scrape(processed.db_path, now=datetime(2026, 11, 13, tzinfo=UTC)))
    assert early[("hsi_batches_waiting", (("stage", "unrecorded"),))] == 0


def _insert_assessment(path: Path, batch_id: str, util: float | None, offset_s: int, status: str = "ok") -> None:
    with connect(path) as conn:
        conn.execute(
            "INSERT INTO risk_assessments (batch_id, camera_id, status, risk_level, prompt_tokens, cached_tokens,"
            " context_utilization, assessed_at) VALUES (?, 'front_door', ?, 'low', 1000, 250, ?, ?)",
            [batch_id, status, util, T0 + timedelta(seconds=offset_s)],
        )


def _quarantine(path: Path, lines: range) -> None:
    with connect(path) as conn:
        for line_no in lines:
            conn.execute("INSERT INTO quarantine VALUES ('in.jsonl', ?, '{', 'not JSON', now())", [line_no])


def test_figures_are_read_at_each_scrape(tmp_path: Path) -> None:
    path = tmp_path / "hsi.duckdb"
    _insert_assessment(path, "b1", 0.3, 0)
    registry = duckdb_registry(str(path))
    first = samples(generate_latest(registry).decode())
    assert first[("hsi_context_utilization_ratio_count", (("camera_id", "front_door"),))] == 1
    assert first[("hsi_quarantined_records_total", ())] == 0
    _insert_assessment(path, "b2", 0.85, 60)
    _quarantine(path, range(1, 3))
    second = samples(generate_latest(registry).decode())
    assert second[("hsi_context_utilization_ratio_count", (("camera_id", "front_door"),))] == 2
    assert second[("hsi_context_utilization_ratio_sum", (("camera_id", "front_door"),))] == pytest.approx(1.15)
    assert second[("hsi_context_utilization_ratio_bucket", (("camera_id", "front_door"), ("le", "0.8")))] == 1
    assert second[("hsi_quarantined_records_total", ())] == 2


def test_empty_or_absent_database_gives_zeros_not_errors(tmp_path: Path) -> None:
    empty = tmp_path / "empty.duckdb"
    with connect(empty):
        pass
    for path in (empty, tmp_path / "absent.duckdb"):
        found = samples(scrape(path))
        assert found[("hsi_database_readable", ())] == 1
        assert found[("hsi_cached_prompt_token_share", ())] == 0.0
        assert found[("hsi_quarantined_records_total", ())] == 0
        assert found[("hsi_oldest_unassessed_batch_age_seconds", ())] == 0
        assert not any(name.startswith("hsi_context_utilization_ratio") for name, _ in found)
    assert not (tmp_path / "absent.duckdb").exists()  # the exporter never creates the database


def test_unreadable_database_publishes_no_counter_rather_than_zeros(tmp_path: Path) -> None:
    """Zeros would read as a counter reset to Prometheus; the series go stale instead and readable says why."""
    path = tmp_path / "broken.duckdb"
    path.write_bytes(b"not a duckdb file" * 100)
    text = scrape(path)
    found = samples(text)
    assert found[("hsi_database_readable", ())] == 0
    assert "hsi_risk_assessments" not in text and "hsi_quarantined_records" not in text


def test_scrape_while_this_process_holds_a_write_connection(tmp_path: Path) -> None:
    path = tmp_path / "hsi.duckdb"
    _quarantine(path, range(1, 4))
    with connect(path) as writer:
        writer.execute("INSERT INTO quarantine VALUES ('in.jsonl', 99, '{', 'not JSON', now())")
        text = generate_latest(duckdb_registry(str(path))).decode()
    assert "hsi_quarantined_records_total 4.0" in text


def test_serve_binds_loopback_by_default(processed: ProcessedSet) -> None:
    assert build_parser().parse_args(["metrics", "serve"]).host == "127.0.0.1"
    with running_exporter(processed.db_path) as exporter:
        assert exporter.host == "127.0.0.1"
        assert listening_addresses(exporter.port) == {"127.0.0.1"}
        reply = httpx.get(exporter.url, timeout=10)
    assert reply.status_code == 200
    assert "hsi_context_utilization_ratio_bucket" in reply.text
