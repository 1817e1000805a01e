"""The readable risk report of `hsi demo` (report.build_report) over a small hand-made DuckDB."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hsi_dagster.cli.report import build_report
from hsi_dagster.core.verdict.assessment import assess, verdict_fields
from hsi_dagster.core.verdict.evidence import Floor
from hsi_dagster.core.verdict.trust import MEASURED, Trust, default_trust
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.pipeline_tables import save_assessment

T0 = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)

# batch_id, camera, started_at offset s, close_reason, detections
BATCHES = [
    ("b_fd1", "front_door", 0, "window", 3),
    ("b_fd2", "front_door", 100, "fast_path", 1),
    ("b_fd3", "front_door", 200, "idle", 2),
    ("b_g1", "garage", 0, "window", 2),
    ("b_g2", "garage", 300, "idle", 1),
    ("b_y1", "backyard", 50, "fast_path", 1),  # never assessed: pending
    ("b_y2", "backyard", 10, "window", 4),
]
# batch_id, status, score, level, summary, prompt_tokens, cached_tokens, utilization, latency_ms, sections_removed
ASSESSMENTS = [
    ("b_fd1", "ok", 72, "high", "person at door at night", 2000, 1000, 0.50, 4000, []),
    ("b_fd2", "ok", 91, "critical", "person forcing the lock", 1000, 500, 0.25, 2000, []),
    ("b_fd3", "ok", 12, "low", "delivery van", 3000, 1500, 0.75, 6000, ["clip"]),
    ("b_g1", "ok", 45, "medium", "car idling", 2000, 0, 0.40, 3000, []),
    ("b_g2", "invalid_output", None, None, None, 4000, 1000, 0.90, 10000, ["pose", "clip"]),
    ("b_y2", "ok", 5, "low", "cat crossing the lawn", 1000, 500, 0.30, 1000, []),
]
ALL_IDS = [b[0] for b in BATCHES]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "hsi.duckdb"
    with connect(path) as conn:
        for batch_id, camera, offset, reason, count in BATCHES:
            started = T0 + timedelta(seconds=offset)
            conn.execute(
                "INSERT INTO detection_batches (batch_id, camera_id, started_at, last_ts, closes_at, close_reason,"
                " detection_count, detection_ids, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    batch_id,
                    camera,
                    started,
                    started,
                    started + timedelta(seconds=30),
                    reason,
                    count,
                    [f"{batch_id}-{i}" for i in range(count)],
                    started,
                ],
            )
        camera_of = {b[0]: b[1] for b in BATCHES}
        for batch_id, status, score, level, summary, prompt, cached, util, latency, removed in ASSESSMENTS:
            conn.execute(
                "INSERT INTO risk_assessments (batch_id, camera_id, status, risk_score, risk_level, summary,"
                " prompt_tokens, cached_tokens, context_utilization, latency_ms, sections_removed, assessed_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    batch_id,
                    camera_of[batch_id],
                    status,
                    score,
                    level,
                    summary,
                    prompt,
                    cached,
                    util,
                    latency,
                    removed,
                    T0,
                ],
            )
    return path


def test_full_report(db: Path) -> None:
    with connect(db, read_only=True) as conn:  # as `hsi demo` reads it
        report = build_report(conn, ALL_IDS)
    # Figures by hand over the 6 measured assessments:
    #   utilization 0.25 0.30 0.40 0.50 0.75 0.90 -> median 0.45, max 0.90; b_fd3 and b_g2 had sections removed
    #   latency 1 2 3 4 6 10 s -> median 3.5 s, p95 = nearest rank round(0.95 * 5) = 5 -> 10.0 s
    #   cached 1000+500+1500+0+1000+500 = 4500 of 2000+1000+3000+2000+4000+1000 = 13000 -> 35 %
    assert report.splitlines() == [
        "Risk report: 7 closed batches",
        "",
        "backyard: 2 batches (1 fast path), 5 detections; 1 low",
        "  [     low   5] cat crossing the lawn",
        "  [pending] b_y1",
        "front_door: 3 batches (1 fast path), 6 detections; 1 critical, 1 high, 1 low",
        "  [critical  91] person forcing the lock",
        "  [    high  72] person at door at night",
        "garage: 2 batches (0 fast path), 3 detections; 1 medium",
        "  [  medium  45] car idling",
        "  [invalid_output] b_g2",
        "",
        "assessed: 5 ok, 1 invalid output, 1 pending",
        "context utilization: median 0.45, max 0.90; 2 prompts had sections removed",
        "latency per assessment: median 3.5s, p95 10.0s",
        "cached prompt tokens: 4500 of 13000 (35%)",
    ]


def test_every_batch_is_covered_and_highest_risk_first(db: Path) -> None:
    with connect(db, read_only=True) as conn:
        report = build_report(conn, ALL_IDS, top=3)
    for batch_id, status, *_ in ASSESSMENTS:
        if status != "ok":
            assert f"[{status}] {batch_id}" in report
    assert "[pending] b_y1" in report
    lines = report.splitlines()
    start = lines.index("front_door: 3 batches (1 fast path), 6 detections; 1 critical, 1 high, 1 low")
    assert lines[start + 1 : start + 4] == [
        "  [critical  91] person forcing the lock",
        "  [    high  72] person at door at night",
        "  [     low  12] delivery van",
    ]


def test_report_covers_only_the_given_batches(db: Path) -> None:
    with connect(db, read_only=True) as conn:
        report = build_report(conn, ["b_g1", "b_y1", "b_unrecorded"])
    assert report.splitlines() == [
        "Risk report: 3 closed batches",
        "",
        "backyard: 1 batches (1 fast path), 1 detections; none assessed",
        "  [pending] b_y1",
        "garage: 1 batches (0 fast path), 2 detections; 1 medium",
        "  [  medium  45] car idling",
        "(unrecorded): 1 batches (0 fast path), 0 detections; none assessed",
        "  [pending] b_unrecorded",
        "",
        "assessed: 1 ok, 0 invalid output, 2 pending",
        "context utilization: median 0.40, max 0.40; 0 prompts had sections removed",
        "latency per assessment: median 3.0s, p95 3.0s",
        "cached prompt tokens: 0 of 2000 (0%)",
    ]


def test_nothing_measured_and_nothing_to_report(db: Path) -> None:
    with connect(db, read_only=True) as conn:
        assert build_report(conn, []) == "no closed batches to report"
        report = build_report(conn, ["b_y1"])
    assert report.splitlines()[-4:] == [
        "assessed: 0 ok, 0 invalid output, 1 pending",
        "context utilization: n/a",
        "latency: n/a",
        "cached prompt tokens: n/a",
    ]


def test_the_report_says_who_decided_each_verdict(db: Path) -> None:
    crowbar = "forcing: action.label 'prying' on 3 frames of track t1 at entry zone 'door' -> 90 critical"
    with connect(db) as conn:
        save_assessment(
            conn,
            {"batch_id": "b_fd2", "camera_id": "front_door", "status": "ok", "risk_score": 91,
             "risk_level": "critical", "summary": "person forcing the lock", "model_score": 8, "floor_score": 91,
             "floor_reasons": [crowbar], "decided_by": "floor"},
        )  # fmt: skip
        save_assessment(
            conn,
            {"batch_id": "b_g2", "camera_id": "garage", "status": "floor_only", "risk_score": 70, "risk_level": "high",
             "summary": "Evidence rules (high, no usable model output): masked at night", "floor_score": 70,
             "floor_reasons": ["masked at night: person t:t2"], "decided_by": "floor", "raw_output": "?",
             "error": "no JSON object found"},
        )  # fmt: skip
        report = build_report(conn, ALL_IDS)
    assert "decided by floor 91 > model 8: forcing: action.label 'prying'" in report
    assert "decided by floor 70 > no model output: masked at night" in report
    assert "garage: 2 batches (0 fast path), 3 detections; 1 high, 1 medium" in report
    assert "1 decided by the evidence alone (no usable model output), 0 invalid output" in report
    assert "evidence floor: decided 2 of 2 verdicts (raised above the model's score)" in report


CROWBAR_REPLY = json.dumps(
    {
        "risk_score": 92,
        "risk_level": "critical",
        "summary": "Masked man prying the front door open with a crowbar in daylight.",
        "reasoning": "Forced entry.",
    }
)


def store_crowbar(conn, trust: Trust) -> None:
    """The issue's reply (92, a crowbar at the front door, no rule firing) stored as the asset stores it."""
    fields, _ = verdict_fields(assess([], lambda _: _Reply(CROWBAR_REPLY)), Floor(0, "low", (), ()), trust)
    save_assessment(conn, {"batch_id": "b_fd2", "camera_id": "front_door", **fields})


class _Reply:
    def __init__(self, content: str) -> None:
        self.content = content


def test_the_report_says_what_the_model_said_and_which_trust_capped_it(db: Path) -> None:
    """Trust 0 (measured): the crowbar reply is stored low 29, and the report says the model said critical and why
    that was not trusted; at trust 3 it is stored critical and there is nothing to say."""
    measured = Trust(0, MEASURED, "measured trust 0", "qwen|1|plain|full")
    with connect(db) as conn:
        store_crowbar(conn, measured)
        report = build_report(conn, ALL_IDS)
    assert "[     low  29] Masked man prying the front door" in report
    assert "decided by trust cap 29 < model 92 (floor 0, measured trust 0)" in report
    assert "model said critical; not trusted for this model: measured trust 0" in report
    assert "model said more than its trust allowed: 1 verdicts" in report
    assert "WARNING unmeasured" not in report
    with connect(db) as conn:
        store_crowbar(conn, Trust(3, MEASURED, "measured trust 3", "qwen|1|plain|full"))
        report = build_report(conn, ALL_IDS)
    assert "[critical  92] Masked man prying" in report and "not trusted" not in report


def test_the_report_warns_when_the_trust_was_not_measured(db: Path) -> None:
    with connect(db) as conn:
        store_crowbar(conn, default_trust("the server that answered (http://gpu:8080) did not report its model"))
        report = build_report(conn, ALL_IDS)
    assert "[    high  84] Masked man prying" in report  # the stated default 2: an alert, not critical
    assert "model said critical; not trusted for this model: the server that answered" in report
    assert (
        "WARNING unmeasured model trust: the server that answered (http://gpu:8080) did not report its model: "
        "stated default trust 2 (run `hsi eval`)"
    ) in report


def test_report_shows_per_camera_how_many_verdicts_were_corrected_and_which_way(db: Path) -> None:
    from hsi_dagster.core.outbound.corrections import check_request
    from hsi_dagster.storage.corrections import correct

    with connect(db) as conn:
        correct(conn, check_request("b_fd1", "low", "the neighbour", source="cli"), T0)  # high -> low
        correct(conn, check_request("b_fd3", "high", source="mqtt"), T0)  # low -> high, then changed to critical
        correct(conn, check_request("b_fd3", "critical", source="mqtt"), T0 + timedelta(seconds=1))
        correct(conn, check_request("b_g1", "medium", source="dagster"), T0)  # confirmed
    with connect(db, read_only=True) as conn:
        lines = build_report(conn, ALL_IDS).splitlines()
    front = lines.index("front_door: 3 batches (1 fast path), 6 detections; 1 critical, 1 high, 1 low")
    assert lines[front + 1] == "  corrected by the household: 2 verdicts (1 lower, 1 higher)"
    garage = lines.index("garage: 2 batches (0 fast path), 3 detections; 1 medium")
    assert lines[garage + 1] == "  corrected by the household: 1 verdicts (1 confirmed)"
    assert not any("corrected" in line for line in lines[:front])  # backyard: none
