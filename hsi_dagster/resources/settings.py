"""The pipeline's settings inside Dagster, configured once with plain values."""

from __future__ import annotations

from typing import Any

import dagster as dg
from pydantic import Field, PrivateAttr

from hsi_dagster.core.camera_profiles import CameraProfile
from hsi_dagster.settings import HsiSettings, load_camera_profiles


class PipelineSettingsResource(dg.ConfigurableResource):
    """Batching rules, enrichment level, budgets: one `HsiSettings` for every step and sensor.

    `values` are the settings read once where the code location loads (`definitions.build_resources`, from
    `HsiSettings.plain_values()`: every setting but the secrets). `get()` rebuilds the same settings from them and
    nothing else: no file, no environment, so a run and its sensor see exactly what the UI shows.
    """

    values: dict[str, Any] = Field(description="Every HsiSettings value except the secrets, by variable name.")

    _settings: HsiSettings | None = PrivateAttr(default=None)

    @classmethod
    def from_settings(cls, settings: HsiSettings) -> PipelineSettingsResource:
        return cls(values=settings.plain_values())

    def get(self) -> HsiSettings:
        """The settings (validated once per resource instance; SettingsError names a bad variable)."""
        if self._settings is None:
            self._settings = HsiSettings.from_values(self.values)
        return self._settings

    def camera_profiles(self) -> dict[str, CameraProfile]:
        """The camera profile file (CAMERA_CONTEXT_PATH), read at each call so that edits apply to the next batch;
        {} when unset. CameraProfileError names the file, camera and field."""
        path = self.get().CAMERA_CONTEXT_PATH
        return load_camera_profiles(path) if path else {}
