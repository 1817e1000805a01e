"""Alert sensors: high or critical assessments -> alerts; a confident person the LLM could not assess still alerts."""

import dagster as dg

from hsi_dagster.jobs import batch_pipeline_job
from hsi_dagster.resources import AlertWebhookResource, HsiDuckDBResource
from hsi_dagster.storage.alerts import risk_alert_for, unassessed_fast_path_alert

RISK_ASSESSMENTS_KEY = dg.AssetKey("risk_assessments")


@dg.sensor(minimum_interval_seconds=15, default_status=dg.DefaultSensorStatus.RUNNING)
def high_risk_alert_sensor(
    context: dg.SensorEvaluationContext, duckdb: HsiDuckDBResource, alert_webhook: AlertWebhookResource
) -> dg.SkipReason:
    """For each new risk_assessments materialization: an alert row (and webhook post) when high or critical."""
    records = context.instance.fetch_materializations(
        RISK_ASSESSMENTS_KEY, limit=200, cursor=context.cursor, ascending=True
    )
    raised = 0
    if records.records:
        with duckdb.get_connection() as conn:
            for record in records.records:
                alert = risk_alert_for(conn, record.partition_key) if record.partition_key else None
                if alert and alert_webhook.raise_alert(conn, alert) is not None:
                    raised += 1
    context.update_cursor(records.cursor)
    return dg.SkipReason(f"{len(records.records)} assessments read, {raised} alerts raised")


@dg.run_failure_sensor(monitored_jobs=[batch_pipeline_job], default_status=dg.DefaultSensorStatus.RUNNING)
def unassessed_fast_path_sensor(
    context: dg.RunFailureSensorContext, duckdb: HsiDuckDBResource, alert_webhook: AlertWebhookResource
) -> None:
    """A confident person that the LLM could not assess still alerts (without LLM text)."""
    batch_id = context.dagster_run.tags.get("dagster/partition")
    if not batch_id:
        return
    with duckdb.get_connection() as conn:
        alert = unassessed_fast_path_alert(conn, batch_id)
        if alert:
            alert_webhook.raise_alert(conn, alert)
