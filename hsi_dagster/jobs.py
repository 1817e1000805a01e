"""Jobs: the per-batch pipeline, the ingest of files, partition retention, and the household's corrections."""

from datetime import UTC, datetime, timedelta

import dagster as dg
from pydantic import Field

from hsi_dagster.assets.assessments import risk_assessments
from hsi_dagster.assets.baselines import camera_baselines
from hsi_dagster.assets.batches import detection_batches
from hsi_dagster.assets.contexts import enriched_contexts
from hsi_dagster.assets.ingest import detections
from hsi_dagster.assets.prompts import budgeted_prompts
from hsi_dagster.assets.timeline import risk_timeline
from hsi_dagster.core.context.history import HistoryRules
from hsi_dagster.core.outbound.corrections import NOTE_MAX_CHARS, CorrectionRefused, check_request
from hsi_dagster.partitions import BATCH_PARTITIONS_NAME, daily_partitions
from hsi_dagster.resources import HsiDuckDBResource, PipelineSettingsResource
from hsi_dagster.storage.batches import batch_ids_closed_before
from hsi_dagster.storage.corrections import correct, corrected_batch_ids, record_refusal
from hsi_dagster.storage.db import DatabaseNotFound
from hsi_dagster.storage.history import prune_activity
from hsi_dagster.storage.visits import prune_visits as prune_visit_links

# One run per batch. Steps mostly wait on HTTP, so they run in the run's own process: a subprocess per step would
# add seconds per batch (docs/dagster.md, "Executor").
batch_pipeline_job = dg.define_asset_job(
    "batch_pipeline",
    selection=[detection_batches, enriched_contexts, budgeted_prompts, risk_assessments],
    executor_def=dg.in_process_executor,
    description="Record a closed batch window, enrich it, budget its prompt and assess its risk.",
)

ingest_job = dg.define_asset_job(
    "ingest_detections",
    selection=[detections],
    executor_def=dg.in_process_executor,
    description="Validate and load JSON Lines detection files.",
)


@dg.op(
    description="Delete dynamic partitions of batches that closed before the retention cut-off (DuckDB rows stay); "
    "a batch the household corrected is kept."
)
def prune_batch_partitions(
    context: dg.OpExecutionContext, duckdb: HsiDuckDBResource, pipeline_settings: PipelineSettingsResource
) -> int:
    settings = pipeline_settings.get()
    cutoff = datetime.now(UTC) - timedelta(days=settings.PARTITION_RETENTION_DAYS)
    try:
        with duckdb.get_connection(read_only=True) as conn:
            old = batch_ids_closed_before(conn, cutoff)
            kept = corrected_batch_ids(conn, old)  # the household's labels: replayed by evaluation, never pruned
    except DatabaseNotFound as exc:
        context.log.info(f"nothing to prune: {exc}")
        return 0
    existing = set(context.instance.get_dynamic_partitions(BATCH_PARTITIONS_NAME))
    doomed = sorted((old - kept) & existing)
    for key in doomed:
        context.instance.delete_dynamic_partition(BATCH_PARTITIONS_NAME, key)
    context.log.info(
        f"deleted {len(doomed)} batch partitions closed before {cutoff.isoformat()}; "
        f"{len(existing) - len(doomed)} remain ({len(kept & existing)} old ones kept: corrected by the household)"
    )
    return len(doomed)


@dg.op(description="Drop camera_activity buckets older than the history window (HISTORY_DAYS + 2 days).")
def prune_camera_activity(
    context: dg.OpExecutionContext, duckdb: HsiDuckDBResource, pipeline_settings: PipelineSettingsResource
) -> int:
    cutoff = datetime.now(UTC) - timedelta(days=HistoryRules.from_settings(pipeline_settings.get()).keep_days)
    try:
        with duckdb.get_connection() as conn:
            pruned = prune_activity(conn, cutoff)
    except DatabaseNotFound as exc:
        context.log.info(f"nothing to prune: {exc}")
        return 0
    context.log.info(f"dropped {pruned} camera_activity buckets before {cutoff.isoformat()}")
    return pruned


@dg.op(
    description="Drop the visit links of the batches retention prunes (older than PARTITION_RETENTION_DAYS, not "
    "corrected) and the visits left with none; a corrected batch keeps its visit."
)
def prune_visits(
    context: dg.OpExecutionContext, duckdb: HsiDuckDBResource, pipeline_settings: PipelineSettingsResource
) -> int:
    cutoff = datetime.now(UTC) - timedelta(days=pipeline_settings.get().PARTITION_RETENTION_DAYS)
    try:
        with duckdb.get_connection() as conn:
            old = batch_ids_closed_before(conn, cutoff)
            pruned = old - corrected_batch_ids(conn, old)
            links, visits = prune_visit_links(conn, pruned, cutoff)
    except DatabaseNotFound as exc:
        context.log.info(f"nothing to prune: {exc}")
        return 0
    context.log.info(f"dropped {links} visit links and {visits} visits of batches closed before {cutoff.isoformat()}")
    return visits


@dg.job(description="Keep the number of batch partitions, the visits and the history aggregate bounded.")
def partition_retention_job():
    prune_batch_partitions()
    prune_visits()
    prune_camera_activity()


partition_retention_schedule = dg.ScheduleDefinition(
    name="partition_retention",
    job=partition_retention_job,
    cron_schedule="17 3 * * *",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Daily: delete batch partitions older than PARTITION_RETENTION_DAYS (default 7) from Dagster (DuckDB "
    "rows stay) and history aggregate buckets older than HISTORY_DAYS + 2.",
)


class CorrectionConfig(dg.Config):
    """A household's correction of a stored verdict (README "Correcting a verdict")."""

    batch_id: str = Field(description="The batch whose stored verdict is corrected (`hsi batches`, the UI).")
    level: str = Field(description="What the household says it was: low, medium, high or critical.")
    note: str | None = Field(None, description=f"Why, at most {NOTE_MAX_CHARS} characters.")


@dg.op(description="Store a correction of a stored verdict (once: a retried run adds nothing).")
def store_correction(context: dg.OpExecutionContext, config: CorrectionConfig, duckdb: HsiDuckDBResource) -> str:
    now = datetime.now(UTC)
    with duckdb.get_connection() as conn:
        try:
            request = check_request(config.batch_id, config.level, config.note, source="dagster")
        except CorrectionRefused as refused:
            record_refusal(conn, "dagster", refused.refusal, now)
            raise dg.Failure(description=f"correction refused: {refused}") from None
        try:
            correction, new = correct(conn, request, now)  # counts its own refusals
        except CorrectionRefused as refused:
            raise dg.Failure(description=f"correction refused: {refused}") from None
    verdict = correction.verdict
    context.add_output_metadata(
        {
            "batch_id": verdict.batch_id,
            "camera": verdict.camera_id,
            "stored_level": verdict.risk_level or "none",
            "corrected_level": request.level,
            "direction": correction.direction,
            "new": new,
        }
    )
    context.log.info(
        f"{'stored' if new else 'already stored'}: {verdict.batch_id} ({verdict.camera_id}) "
        f"{verdict.risk_level} -> {request.level} ({correction.direction})"
    )
    return correction.direction


@dg.job(description="Correct a stored verdict: run config batch_id, level, note (the UI's run history keeps it).")
def correct_verdict_job():
    store_correction()


camera_baselines_job = dg.define_asset_job(
    "camera_baselines_job",
    selection=[camera_baselines],
    executor_def=dg.in_process_executor,
    description="Re-derive the history aggregate from the detections and show what is usual per camera and hour.",
)

camera_baselines_schedule = dg.ScheduleDefinition(
    name="camera_baselines",
    job=camera_baselines_job,
    cron_schedule="23 0 * * *",
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Daily: camera_baselines (batches do not wait for it: ingest keeps the aggregate current).",
)


risk_timeline_job = dg.define_asset_job(
    "risk_timeline_job",
    selection=[risk_timeline],
    partitions_def=daily_partitions,
    executor_def=dg.in_process_executor,
    description="Draw the risk timeline and summary of one day (UTC).",
)


@dg.schedule(
    job=risk_timeline_job,
    cron_schedule="5 * * * *",
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
)
def risk_timeline_schedule(context: dg.ScheduleEvaluationContext) -> list[dg.RunRequest]:
    """Every hour: redraw today's timeline; in the first hour of a day, also yesterday's, now complete."""
    now = (context.scheduled_execution_time or datetime.now(UTC)).astimezone(UTC)
    days = [now.date() - timedelta(days=1), now.date()] if now.hour == 0 else [now.date()]
    return [
        dg.RunRequest(run_key=f"{day.isoformat()}@{now:%Y-%m-%dT%H}", partition_key=day.isoformat()) for day in days
    ]
