"""A fast-path batch is judged with what its track has shown so far.

The fast path closes a batch on one confident `person` frame so the verdict comes early (data contract, section 2).
Judged alone, that one frame has no dwell, no earlier action and none of the zones the track crossed: the first
verdict a household sees of a critical scene was low. So its floor is also computed over the same track's earlier
detections on that camera (assets/assessments.py reads them, bounded in time and number) plus the batch's own, and
the higher floor stands, its reasons saying they come from the track so far. Never lower: the batch's own floor is
kept when it is the higher (or the track shows nothing more).
"""

from __future__ import annotations

from datetime import datetime

from hsi_dagster.core.verdict.evidence import Floor

TRACK_LOOKBACK_SECONDS = 300  # a track's earlier frames older than this are a different scene for the verdict
TRACK_MAX_DETECTIONS = 200  # bounded work on a long track (a car parked all night)


def with_track_so_far(own: Floor, so_far: Floor | None, earlier: int, since: datetime | None) -> Floor:
    """The batch's floor, or the track-so-far floor when it is higher (reasons prefixed with how much was read)."""
    if so_far is None or so_far.score <= own.score:
        return own
    read = f"track so far ({earlier} earlier detection{'s' if earlier != 1 else ''} since {since:%H:%M:%S} UTC): "
    return Floor(
        score=so_far.score,
        level=so_far.level,
        reasons=tuple(read + reason for reason in so_far.reasons),
        ignored=tuple(dict.fromkeys((*own.ignored, *so_far.ignored))),
    )
