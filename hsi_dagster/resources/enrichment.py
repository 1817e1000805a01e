"""Where a batch's vision-model outputs come from: one resource interface, two implementations.

`InlineEnrichmentResource` (ENRICHMENT_BACKEND=inline, the default): the payloads are inside the detection records.
`HttpEnrichmentResource` (ENRICHMENT_BACKEND=http, `resources/enrichment_gateway.py`): a vision gateway, within
ENRICHMENT_TIMEOUT_SECONDS. Assets ask for an `EnrichmentResource`; `definitions.build_resources` picks the class.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import dagster as dg

from hsi_dagster.core.context.gateway_protocol import EnrichmentResult


class EnrichmentResource(dg.ConfigurableResource, ABC):
    """The enrichment payloads of a batch's detections, and the requested types that did not arrive in time."""

    @abstractmethod
    def fetch(
        self, batch: Mapping[str, Any], detections: Sequence[Mapping[str, Any]], types: Collection[str]
    ) -> EnrichmentResult: ...


class InlineEnrichmentResource(EnrichmentResource):
    """Payloads are already inside the detection records (contract section 1): nothing to wait for."""

    def fetch(
        self, batch: Mapping[str, Any], detections: Sequence[Mapping[str, Any]], types: Collection[str]
    ) -> EnrichmentResult:
        return EnrichmentResult(detections=[dict(d) for d in detections])
