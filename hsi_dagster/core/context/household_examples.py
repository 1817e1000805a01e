"""The household's own judgements as worked examples: the corrected batches of this camera most similar to the
batch being judged. Pure code.

Similarity is structured (core/context/patterns.py), never caption text: a candidate must share a detector label;
then shared labels (weight 3), shared zones (2), the same recognised identity (2) and a close hour (1, falling
to 0 at twelve hours apart) rank it; ties go to the newest correction. At most MAX_EXAMPLES, each with at most
MAX_NAMES labels and zones and a note cut to NOTE_CHARS: bounded in tokens whatever the household typed. The prompt
renders them as a section removed first under budget pressure (core/context/sections.py) and quotes every string
as untrusted data, like a caption (core/prompt/messages.py): a note came over MQTT.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from hsi_dagster.core.context.context_models import EnrichedContext, HouseholdExample
from hsi_dagster.core.context.patterns import Pattern, batch_pattern, local_hour

MAX_EXAMPLES = 3
MAX_NAMES = 6
NOTE_CHARS = 120


@dataclass(frozen=True)
class CorrectedBatch:
    """A corrected batch as storage reads it: its stored context, the stored level and the household's latest."""

    batch_id: str
    context: EnrichedContext
    stored_level: str | None
    household_level: str
    note: str | None
    received_at: datetime


def _overlap(a: Iterable[str], b: Iterable[str]) -> float:
    left, right = set(a), set(b)
    return len(left & right) / len(left | right) if left | right else 1.0


def similarity(pattern: Pattern, other: Pattern) -> float:
    """0 when the camera differs or no label is shared; else the weighted overlap of the module docstring."""
    if pattern.camera_id != other.camera_id or not set(pattern.labels) & set(other.labels):
        return 0.0
    hours = abs(pattern.hour_band - other.hour_band)
    identity = 1.0 if pattern.identities and pattern.identities == other.identities else 0.0
    return (
        3 * _overlap(pattern.labels, other.labels)
        + 2 * _overlap(pattern.zones, other.zones)
        + 2 * identity
        + 1
        - min(hours, 24 - hours) / 12
    )


def _example(corrected: CorrectedBatch) -> HouseholdExample:
    pattern = batch_pattern(corrected.context)
    local = corrected.context.detections.local_start
    when = local[11:16] if local and len(local) >= 16 else f"{local_hour(corrected.context):02d}:00"
    return HouseholdExample(
        local_time=when,
        labels=list(pattern.labels[:MAX_NAMES]),
        zones=list(pattern.zones[:MAX_NAMES]),
        identities=list(pattern.identities[:MAX_NAMES]),
        stored_level=corrected.stored_level,
        household_level=corrected.household_level,
        note=(corrected.note or "")[:NOTE_CHARS] or None,
    )


def similar_examples(
    context: EnrichedContext, candidates: Iterable[CorrectedBatch], limit: int = MAX_EXAMPLES
) -> list[HouseholdExample]:
    """The `limit` (at most MAX_EXAMPLES) corrected batches most similar to `context`'s batch, most similar first;
    the batch itself never (a batch assessed again must not be its own example)."""
    pattern = batch_pattern(context)
    scored = []
    for candidate in candidates:
        if candidate.batch_id == context.batch.batch_id:
            continue
        score = similarity(pattern, batch_pattern(candidate.context))
        if score > 0:
            scored.append((score, candidate.received_at, candidate))
    scored.sort(key=lambda item: (-item[0], -item[1].timestamp()))
    return [_example(candidate) for _, _, candidate in scored[: max(0, min(limit, MAX_EXAMPLES))]]
