"""frigate_writeback_sensor: each verdict on a batch of Frigate events written back to those events (FRIGATE_WRITEBACK,
off by default; FRIGATE_URL). What is written and which Frigate versions take it: core/outbound/frigate_writeback.py.

Optional by design: it runs beside the pipeline and never blocks it. Frigate absent or answering 5xx: the batch is
retried at the next ticks (MAX_ATTEMPTS in all) and the tick stops at the first unanswered call; a 4xx (an event
gone, an endpoint this Frigate version lacks): recorded as failed, not retried. Nothing here raises.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import dagster as dg

from hsi_dagster.core.outbound.frigate_writeback import (
    DONE,
    FAILED,
    MAX_ATTEMPTS,
    RETRY,
    WritebackTarget,
    merged_description,
    outcome_for,
    sub_label_for,
    verdict_line,
)
from hsi_dagster.resources import HsiDuckDBResource, PipelineSettingsResource
from hsi_dagster.resources.frigate import FrigateResource, FrigateWriteError
from hsi_dagster.sensors.default_status import default_status_when
from hsi_dagster.storage.frigate_writeback import pending_writebacks, record_writeback, writeback_since

MAX_BATCHES_PER_TICK = 50


@dataclass
class WritebackReport:
    done: int = 0
    failed: int = 0
    retry: int = 0
    unreachable: str | None = None

    def summary(self) -> str:
        text = f"{self.done} verdicts written back, {self.failed} failed (4xx, not retried), {self.retry} to retry"
        return text + (f"; Frigate did not answer: {self.unreachable}" if self.unreachable else "")


def _write(frigate: FrigateResource, target: WritebackTarget, mode: str) -> None:
    """Every event of the batch; FrigateWriteError at the first call that fails."""
    line = verdict_line(target.risk_level, target.risk_score, target.summary)
    for event_id in target.event_ids:
        event = frigate.event(event_id)
        if mode in ("description", "both"):
            data = event.get("data") if isinstance(event.get("data"), dict) else {}
            frigate.set_description(event_id, merged_description((data or {}).get("description"), line))
        if mode in ("sub_label", "both"):
            label = sub_label_for(target.risk_level, event)
            if label:
                frigate.set_sub_label(event_id, label)


def write_back_pending(
    database: HsiDuckDBResource,
    frigate: FrigateResource,
    mode: str,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> WritebackReport:
    report = WritebackReport()
    with database.get_connection() as conn:
        targets = pending_writebacks(conn, writeback_since(conn, now()), MAX_BATCHES_PER_TICK)
    for target in targets:
        try:
            _write(frigate, target, mode)
            status, error = DONE, None
        except FrigateWriteError as exc:
            status, error = outcome_for(exc.status_code), str(exc)
            if status == RETRY and target.attempts + 1 >= MAX_ATTEMPTS:
                status = FAILED
        with database.get_connection() as conn:
            record_writeback(conn, target, status if status != FAILED else f"{FAILED}: {error}", error, now())
        setattr(report, status, getattr(report, status) + 1)
        if status == RETRY and error and "HTTP" not in error:
            report.unreachable = error  # no answer: the rest waits for the next tick
            break
    return report


def _writeback_default_status() -> dg.DefaultSensorStatus:
    """Running by default only when FRIGATE_WRITEBACK is on and FRIGATE_URL set where the code location loads."""
    return default_status_when(lambda settings: settings.FRIGATE_WRITEBACK != "off" and bool(settings.FRIGATE_URL))


@dg.sensor(minimum_interval_seconds=30, default_status=_writeback_default_status())
def frigate_writeback_sensor(
    context: dg.SensorEvaluationContext,
    duckdb: HsiDuckDBResource,
    frigate: FrigateResource,
    pipeline_settings: PipelineSettingsResource,
) -> dg.SkipReason:
    """Verdicts of Frigate batches -> their Frigate events (description / sub label); never raises."""
    mode = pipeline_settings.get().FRIGATE_WRITEBACK
    if mode == "off":
        return dg.SkipReason("FRIGATE_WRITEBACK is off")
    if not frigate.url.strip():
        return dg.SkipReason("FRIGATE_URL is not set")
    try:
        report = write_back_pending(duckdb, frigate, mode)
    except Exception as exc:  # a database problem: said, and retried at the next tick
        context.log.error(f"frigate write-back: {type(exc).__name__}: {exc}")
        return dg.SkipReason(f"frigate write-back failed: {type(exc).__name__}: {exc}")
    if report.unreachable:
        context.log.warning(f"frigate write-back: {report.unreachable}")
    return dg.SkipReason(report.summary())
