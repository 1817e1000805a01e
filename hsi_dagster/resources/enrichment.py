"""Where a batch's vision-model outputs come from, with the enrichment time limit (ENRICHMENT_TIMEOUT_SECONDS)."""

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import dagster as dg

from hsi_dagster.core.enrichment_backends import EnrichmentResult, enrichment_source


class EnrichmentResource(dg.ConfigurableResource):
    """`inline` (payloads inside the detection records, the default) or `http` (a vision gateway).

    With `http`, a batch that is not fully enriched within `timeout_seconds` goes on with what is ready and the
    context records which types are missing.
    """

    backend: str = "inline"
    gateway_url: str = "http://127.0.0.1:8092"
    timeout_seconds: float = 30.0

    def fetch(
        self, batch: Mapping[str, Any], detections: Sequence[Mapping[str, Any]], types: Collection[str]
    ) -> EnrichmentResult:
        return enrichment_source(self.backend, self.gateway_url, self.timeout_seconds).fetch(batch, detections, types)
