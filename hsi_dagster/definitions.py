"""The one `dg.Definitions` of hsi-dagster.

Lineage: detections -> detection_batches -> enriched_contexts -> budgeted_prompts -> risk_assessments,
one partition per batch window. `batch_window_sensor` requests a run per closed window; `inbox_sensor` ingests
dropped files; alerts follow high-risk assessments. Resources read `.env` (pydantic-settings) through EnvVar.
"""

from __future__ import annotations

import os

import dagster as dg

from hsi_dagster.assets.assessments import risk_assessments
from hsi_dagster.assets.batches import detection_batches
from hsi_dagster.assets.contexts import enriched_contexts
from hsi_dagster.assets.ingest import detections
from hsi_dagster.assets.prompts import budgeted_prompts
from hsi_dagster.assets.timeline import risk_timeline
from hsi_dagster.jobs import (
    batch_pipeline_job,
    ingest_job,
    partition_retention_job,
    partition_retention_schedule,
    risk_timeline_job,
    risk_timeline_schedule,
)
from hsi_dagster.resources import (
    AlertWebhookResource,
    EnrichmentResource,
    HsiDuckDBResource,
    LlamaServerResource,
    PipelineSettingsResource,
)
from hsi_dagster.resources.frigate import FrigateResource
from hsi_dagster.sensors import (
    batch_window_sensor,
    frigate_events_sensor,
    high_risk_alert_sensor,
    inbox_sensor,
    unassessed_fast_path_sensor,
)
from hsi_dagster.settings import HsiSettings, load_settings


def expose_settings_to_environment(settings: HsiSettings) -> None:
    """Let `dg.EnvVar` see values that come from `.env` or defaults (the environment still wins)."""
    defaults = {
        "HSI_DUCKDB_PATH": settings.HSI_DUCKDB_PATH,
        "LLAMA_SERVER_URL": ",".join(settings.llm_urls),
        "ENRICHMENT_BACKEND": settings.ENRICHMENT_BACKEND,
        "ENRICHMENT_GATEWAY_URL": settings.ENRICHMENT_GATEWAY_URL,
    }
    if settings.api_key:
        defaults["LLAMA_API_KEY"] = settings.api_key
    for name, value in defaults.items():
        if not os.environ.get(name):
            os.environ[name] = value


def build_resources(settings: HsiSettings) -> dict[str, dg.ConfigurableResource]:
    expose_settings_to_environment(settings)
    return {
        "duckdb": HsiDuckDBResource(database=dg.EnvVar("HSI_DUCKDB_PATH")),
        "llm": LlamaServerResource(
            base_url=dg.EnvVar("LLAMA_SERVER_URL"),
            api_key=dg.EnvVar("LLAMA_API_KEY") if settings.api_key else None,
            read_timeout_seconds=settings.LLM_READ_TIMEOUT_SECONDS,
            startup_timeout_seconds=settings.LLM_STARTUP_TIMEOUT_SECONDS,
            max_output_tokens=settings.NEMOTRON_MAX_OUTPUT_TOKENS,
        ),
        "enrichment": EnrichmentResource(
            backend=dg.EnvVar("ENRICHMENT_BACKEND"),
            gateway_url=dg.EnvVar("ENRICHMENT_GATEWAY_URL"),
            timeout_seconds=settings.ENRICHMENT_TIMEOUT_SECONDS,
        ),
        "alert_webhook": AlertWebhookResource(
            url=settings.ALERT_WEBHOOK_URL, cooldown_seconds=settings.ALERT_COOLDOWN_SECONDS
        ),
        "frigate": FrigateResource(
            url=settings.FRIGATE_URL or "",
            timeout_seconds=settings.FRIGATE_API_TIMEOUT_SECONDS,
            page_size=settings.FRIGATE_API_PAGE_SIZE,
            settle_seconds=settings.FRIGATE_API_SETTLE_SECONDS,
        ),
        "pipeline_settings": PipelineSettingsResource(),
    }


defs = dg.Definitions(
    assets=[detections, detection_batches, enriched_contexts, budgeted_prompts, risk_assessments, risk_timeline],
    jobs=[batch_pipeline_job, ingest_job, partition_retention_job, risk_timeline_job],
    sensors=[
        batch_window_sensor,
        inbox_sensor,
        high_risk_alert_sensor,
        unassessed_fast_path_sensor,
        frigate_events_sensor,
    ],
    schedules=[partition_retention_schedule, risk_timeline_schedule],
    resources=build_resources(load_settings()),
)
