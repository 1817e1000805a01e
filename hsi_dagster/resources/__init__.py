"""Dagster resources of the project: the LLM server, the DuckDB file, the enrichment source, alerts, the settings."""

from hsi_dagster.resources.alerts import AlertWebhookResource
from hsi_dagster.resources.enrichment import EnrichmentResource, InlineEnrichmentResource
from hsi_dagster.resources.enrichment_gateway import HttpEnrichmentResource
from hsi_dagster.resources.llm import LlamaServerResource
from hsi_dagster.resources.settings import PipelineSettingsResource
from hsi_dagster.resources.storage import HsiDuckDBResource

__all__ = [
    "AlertWebhookResource",
    "EnrichmentResource",
    "HsiDuckDBResource",
    "HttpEnrichmentResource",
    "InlineEnrichmentResource",
    "LlamaServerResource",
    "PipelineSettingsResource",
]
