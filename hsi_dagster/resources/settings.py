"""The pipeline's settings inside Dagster: `.env` read by pydantic-settings, with per-deployment overrides."""


import dagster as dg

from hsi_dagster.settings import HsiSettings, load_settings


class PipelineSettingsResource(dg.ConfigurableResource):
    """Batching rules, enrichment level, budgets: one `HsiSettings` for every step of a run.

    `overrides` lets tests (or a second code location) change a value without editing `.env`.
    """

    overrides: dict[str, str] = {}

    def get(self) -> HsiSettings:
        return load_settings(**self.overrides)
