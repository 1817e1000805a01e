"""Alert sensors: high or critical verdicts -> alerts; a confident person the LLM could not assess still alerts;
and the evidence-only pass (`alert_on_evidence`), the alert before the LLM, which inbox_sensor's tick runs after
each load and evidence_watch_sensor between those ticks (and after each database write when there is no inbox)."""

import logging
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg

from hsi_dagster.assets.visits import link_evidence_alert, named_visit
from hsi_dagster.core.context.camera_profiles import CameraProfile
from hsi_dagster.core.verdict.evidence import EvidenceRules
from hsi_dagster.core.verdict.evidence_alerts import EvidenceAlert, evidence_alerts
from hsi_dagster.core.verdict.exceptions import ExceptionPolicy
from hsi_dagster.jobs import batch_pipeline_job
from hsi_dagster.resources import AlertWebhookResource, HsiDuckDBResource, PipelineSettingsResource
from hsi_dagster.settings import HsiSettings
from hsi_dagster.storage.alerts import risk_alert_for, unassessed_fast_path_alert
from hsi_dagster.storage.evidence_alerts import (
    claim_evidence_alert,
    evidence_candidates,
    pending_evidence_alerts,
    set_webhook_status,
    visit_alerted_status,
)
from hsi_dagster.storage.exceptions import exceptions_in_force

EVIDENCE_INGESTED_WITHIN = timedelta(seconds=60)  # each pass re-judges what arrived this recently (keys dedupe)
EVIDENCE_SEEN_WITHIN = timedelta(minutes=5)  # older detections (a replay, a bulk load) get no evidence-only alert
EVIDENCE_PENDING_RETRY_AFTER = timedelta(seconds=30)  # a claimed alert whose tick died before posting it
LOG = logging.getLogger(__name__)

RISK_ASSESSMENTS_KEY = dg.AssetKey("risk_assessments")


@dg.sensor(minimum_interval_seconds=15, default_status=dg.DefaultSensorStatus.RUNNING)
def high_risk_alert_sensor(
    context: dg.SensorEvaluationContext,
    duckdb: HsiDuckDBResource,
    alert_webhook: AlertWebhookResource,
) -> dg.SkipReason:
    """For each new risk_assessments materialization: an alert row (and webhook post) when high or critical. (The
    evidence-only alerts, before any verdict, come from inbox_sensor and evidence_watch_sensor.)"""
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


def claim_evidence_alerts(
    duckdb: HsiDuckDBResource,
    settings: HsiSettings,
    profiles: Mapping[str, CameraProfile],
    now: datetime | None = None,
) -> list[EvidenceAlert]:
    """The alert before the LLM (core/verdict/evidence_alerts.py), first half: detections ingested in the last minute
    (any path: inbox, `hsi ingest`, Frigate) whose evidence alone is high or critical are stored once per camera +
    track + cooldown slot, before any post, so a pass that runs again sends nothing twice. Returns what to post:
    the alerts this call stored, and claims whose tick died before their post. The household exceptions in force
    lift presence rules only, as for the batch's floor (core/verdict/evidence_alerts.py). Each alert's detections are
    linked into the site's visit first (assets/visits.py `link_evidence_alert`): the alert names its visit, and one
    the visit already raised at this level or above is stored with status 'visit already alerted: <id>', not posted."""
    now = now or datetime.now(UTC)
    rules, policy = EvidenceRules.from_settings(settings), ExceptionPolicy.from_settings(settings)
    with duckdb.get_connection() as conn:
        rows, new_ids = evidence_candidates(conn, now - EVIDENCE_INGESTED_WITHIN, now - EVIDENCE_SEEN_WITHIN)
        cameras = sorted({str(row["camera_id"]) for row in rows})
        exceptions = {camera: exceptions_in_force(conn, camera, rules, policy, now) for camera in cameras}
        decided = evidence_alerts(
            rows,
            new_ids,
            profiles,
            cooldown_seconds=settings.ALERT_COOLDOWN_SECONDS,
            rules=rules,
            exceptions=exceptions,
            at=now,
        )
        claimed = []
        for decision in decided:
            try:
                alert, already = link_evidence_alert(conn, decision, settings, profiles)
            except Exception as exc:  # noqa: BLE001 - the alert goes out without its visit; the batch links later
                LOG.warning(f"evidence-only alert {decision.alert_key}: not linked into a visit: {exc!r}")
                alert, already = decision, None
            if not claim_evidence_alert(conn, alert, now):
                continue
            if already is not None:  # one alert per visit and level: stored (MQTT shows it), not posted again
                set_webhook_status(conn, alert.alert_key, visit_alerted_status(already))
                continue
            claimed.append(alert)
        claimed += [named_visit(conn, a) for a in pending_evidence_alerts(conn, now - EVIDENCE_PENDING_RETRY_AFTER)]
    return claimed


def post_evidence_alerts(
    duckdb: HsiDuckDBResource, webhook: AlertWebhookResource, claimed: list[EvidenceAlert]
) -> None:
    """Second half: post the claimed alerts at once (the webhook; MQTT reads the table) and store each status. The
    webhook's per-camera cooldown does not hold these back: the key already allows one per track and cooldown."""
    for alert in claimed:  # outside any connection: a slow webhook must not hold the database's write lock
        status = webhook.post(alert.payload())
        with duckdb.get_connection() as conn:
            set_webhook_status(conn, alert.alert_key, status)


def claim_on_evidence(
    context: dg.SensorEvaluationContext, duckdb: HsiDuckDBResource, pipeline_settings: PipelineSettingsResource
) -> list[EvidenceAlert]:
    """`claim_evidence_alerts` from a sensor tick: logged, and never the reason a tick fails (the tick's own work,
    loading and planning, must go on; the batch's verdict still alerts)."""
    if not Path(duckdb.database).exists():
        return []  # nothing ingested yet; do not create the database here
    try:
        return claim_evidence_alerts(duckdb, pipeline_settings.get(), pipeline_settings.camera_profiles())
    except Exception as exc:  # noqa: BLE001 - any failure here is logged, the tick goes on
        context.log.error(f"evidence-only alerts: {type(exc).__name__}: {exc}")
        return []


def post_claimed(
    context: dg.SensorEvaluationContext,
    duckdb: HsiDuckDBResource,
    webhook: AlertWebhookResource,
    claimed: list[EvidenceAlert],
) -> None:
    """`post_evidence_alerts` from a sensor tick, logged; a failure leaves the claims pending for a later pass."""
    try:
        post_evidence_alerts(duckdb, webhook, claimed)
    except Exception as exc:  # noqa: BLE001 - any failure here is logged, the tick goes on
        context.log.error(f"evidence-only alerts: {type(exc).__name__}: {exc}")
        return
    for alert in claimed:
        context.log.warning(
            f"evidence-only alert {alert.alert_key}: {alert.risk_level} {alert.risk_score}: "
            + (alert.reasons[0] if alert.reasons else "")
        )


def alert_on_evidence(
    context: dg.SensorEvaluationContext,
    duckdb: HsiDuckDBResource,
    pipeline_settings: PipelineSettingsResource,
    webhook: AlertWebhookResource,
) -> None:
    """The evidence-only pass from a sensor tick: claim, then post (`claim_on_evidence`, `post_claimed`)."""
    post_claimed(context, duckdb, webhook, claim_on_evidence(context, duckdb, pipeline_settings))
