"""Dagster resources of the project: the LLM server, the DuckDB file, the enrichment source, the settings."""

from hsi_dagster.resources.enrichment import EnrichmentResource
from hsi_dagster.resources.llm import LlamaServerResource
from hsi_dagster.resources.settings import PipelineSettingsResource
from hsi_dagster.resources.storage import HsiDuckDBResource

__all__ = ["EnrichmentResource", "HsiDuckDBResource", "LlamaServerResource", "PipelineSettingsResource"]
