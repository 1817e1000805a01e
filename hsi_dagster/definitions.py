"""The one `dg.Definitions` of hsi-dagster.

Lineage: detections -> detection_batches -> enriched_contexts -> budgeted_prompts -> risk_assessments,
one partition per batch window. `inbox_sensor` loads dropped files in its tick and requests a run per closed window
(`batch_window_sensor` does the latter when there is no inbox folder); alerts follow high-risk assessments.

Configuration takes one route: `load_settings()` reads the settings once when this module loads (the process
environment over `hsi.env`, see hsi_dagster/settings.py), and `build_resources` builds each resource with the
`from_settings` beside it (plain values); `dg.EnvVar` is used for the secrets only (LLAMA_API_KEY,
ALERT_WEBHOOK_URL, MQTT_PASSWORD). Nothing here writes `os.environ`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import dagster as dg

from hsi_dagster.assets.assessments import risk_assessments
from hsi_dagster.assets.baselines import camera_baselines
from hsi_dagster.assets.batches import detection_batches
from hsi_dagster.assets.contexts import enriched_contexts
from hsi_dagster.assets.evaluation import evaluation
from hsi_dagster.assets.ingest import detections
from hsi_dagster.assets.prompts import budgeted_prompts
from hsi_dagster.assets.timeline import risk_timeline
from hsi_dagster.core.prompt.tokens import preload_tokenizer
from hsi_dagster.jobs import (
    batch_pipeline_job,
    camera_baselines_job,
    camera_baselines_schedule,
    correct_verdict_job,
    ingest_job,
    partition_retention_job,
    partition_retention_schedule,
    risk_timeline_job,
    risk_timeline_schedule,
)
from hsi_dagster.resources import (
    AlertWebhookResource,
    HsiDuckDBResource,
    HttpEnrichmentResource,
    InlineEnrichmentResource,
    LlamaServerResource,
    PipelineSettingsResource,
)
from hsi_dagster.resources.frigate import FrigateResource
from hsi_dagster.resources.mqtt import MqttPublisherResource
from hsi_dagster.sensors import (
    batch_window_sensor,
    evidence_watch_sensor,
    frigate_events_sensor,
    frigate_reviews_sensor,
    frigate_writeback_sensor,
    high_risk_alert_sensor,
    inbox_sensor,
    unassessed_fast_path_sensor,
    verdict_publisher_sensor,
)
from hsi_dagster.settings import HsiSettings, dagster_dotenv_settings, load_settings


def build_resources(settings: HsiSettings) -> dict[str, dg.ConfigurableResource]:
    """Every resource, each built by the `from_settings` beside it; the secrets (API key, webhook URL, MQTT
    password) as dg.EnvVar, only when set."""
    return {
        "duckdb": HsiDuckDBResource.from_settings(settings),
        "llm": LlamaServerResource.from_settings(settings, dg.EnvVar("LLAMA_API_KEY") if settings.api_key else None),
        "enrichment": HttpEnrichmentResource.from_settings(settings)
        if settings.ENRICHMENT_BACKEND == "http"
        else InlineEnrichmentResource(),
        "alert_webhook": AlertWebhookResource.from_settings(
            settings, dg.EnvVar("ALERT_WEBHOOK_URL") if settings.alert_webhook_url else None
        ),
        "frigate": FrigateResource.from_settings(settings),
        "mqtt": MqttPublisherResource.from_settings(
            settings, dg.EnvVar("MQTT_PASSWORD") if settings.MQTT_PASSWORD else None
        ),
        "pipeline_settings": PipelineSettingsResource.from_settings(settings),
    }


def configuration_warnings(settings: HsiSettings, environ: Mapping[str, str], directory: str = ".") -> list[str]:
    """What would make a Dagster process run with other values than the operator meant (logged at load)."""
    warnings = []
    from_dotenv = dagster_dotenv_settings(directory)
    if from_dotenv:
        warnings.append(
            f"{os.path.abspath(os.path.join(directory, '.env'))} sets {', '.join(from_dotenv)}: Dagster's commands "
            "load that file OVER the process environment, so there these values beat exported ones; keep settings "
            "in hsi.env (HSI_ENV_FILE), which the environment overrides"
        )
    for name, value, resource in (
        ("LLAMA_API_KEY", settings.api_key, "llm"),
        ("ALERT_WEBHOOK_URL", settings.alert_webhook_url, "alert_webhook"),
        ("MQTT_PASSWORD", settings.MQTT_PASSWORD, "mqtt"),
    ):
        if value and not environ.get(name):
            warnings.append(
                f"{name} is set in the settings file but not in this process's environment: Dagster resources take "
                f"secrets from the environment only (dg.EnvVar), so runs will fail to configure the {resource} "
                f"resource; export {name} where Dagster runs"
            )
    return warnings


loaded_settings = load_settings()
for warning in configuration_warnings(loaded_settings, os.environ):
    dg.get_dagster_logger().warning(warning)


defs = dg.Definitions(
    assets=[
        detections,
        detection_batches,
        camera_baselines,
        enriched_contexts,
        budgeted_prompts,
        risk_assessments,
        risk_timeline,
        evaluation,
    ],
    jobs=[
        batch_pipeline_job,
        ingest_job,
        partition_retention_job,
        risk_timeline_job,
        camera_baselines_job,
        correct_verdict_job,
    ],
    sensors=[
        batch_window_sensor,
        inbox_sensor,
        evidence_watch_sensor,
        high_risk_alert_sensor,
        unassessed_fast_path_sensor,
        frigate_events_sensor,
        frigate_reviews_sensor,
        verdict_publisher_sensor,
        frigate_writeback_sensor,
    ],
    schedules=[partition_retention_schedule, risk_timeline_schedule, camera_baselines_schedule],
    resources=build_resources(loaded_settings),
    # Every launch path without a job of its own (`dagster asset materialize`, `dg launch --assets`, the UI's
    # Materialize button, asset backfills) runs the implicit asset job: its steps mostly wait on HTTP, so they run in
    # the run's process, as batch_pipeline's do, instead of a process per step (seconds each).
    executor=dg.in_process_executor,
)


def warm_up() -> None:
    """Called by a pre-started run worker (hsi_dagster/instance/worker.py) before its run arrives: what every batch run
    would otherwise load in its first prompt step."""
    preload_tokenizer()
