"""What one run may change for the batches it (re-)assesses: the run config of budgeted_prompts and risk_assessments.

A backfill carries it to every run it launches (the UI's "Add config" in the partition dialog, or `--config` /
`--config-json` of `dagster asset materialize` and `dg launch`), so a chosen set of batches can be re-assessed with
another output budget while the sensor's runs keep the settings. Each write replaces its batch's row.
"""

from __future__ import annotations

import dagster as dg
from pydantic import Field

from hsi_dagster.settings import HsiSettings


class AssessmentRunConfig(dg.Config):
    """Overrides for one run; unset fields keep the settings. Give budgeted_prompts and risk_assessments the same
    values: the prompt is fitted to leave room for exactly that many output tokens in the server's slot."""

    max_output_tokens: int | None = Field(
        default=None,
        description="Output tokens the model may write for each assessment (default: NEMOTRON_MAX_OUTPUT_TOKENS). "
        "The prompt budget is the per-slot context minus this and the safety margin.",
    )

    def output_tokens(self, settings: HsiSettings) -> int:
        """The output reserve of this run; a clear error for a value no reply fits in."""
        if self.max_output_tokens is None:
            return settings.NEMOTRON_MAX_OUTPUT_TOKENS
        if self.max_output_tokens < 1:
            raise dg.Failure(f"run config max_output_tokens must be at least 1, got {self.max_output_tokens}")
        return self.max_output_tokens
