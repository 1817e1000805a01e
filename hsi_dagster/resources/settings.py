"""The pipeline's settings inside Dagster: `.env` read by pydantic-settings, with per-deployment overrides."""

import dagster as dg
from pydantic import PrivateAttr

from hsi_dagster.settings import HsiSettings, load_settings


class PipelineSettingsResource(dg.ConfigurableResource):
    """Batching rules, enrichment level, budgets: one `HsiSettings` for every step of a run.

    `overrides` lets tests (or a second code location) change a value without editing `.env`.
    Inside a run the settings are read once, in `setup_for_execution` (reading `.env` costs milliseconds per call
    and every step asks); outside a run (sensors, tests) `get()` reads them afresh each time.
    """

    overrides: dict[str, str] = {}

    _run_settings: HsiSettings | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._run_settings = load_settings(**self.overrides)

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        self._run_settings = None

    def get(self) -> HsiSettings:
        return self._run_settings if self._run_settings is not None else load_settings(**self.overrides)
