"""What a camera usually sees at this hour, and what the other cameras saw just before: the history facts.

Pure code (no Dagster, DuckDB or I/O). storage/history.py runs the SQL; this module turns its plain rows into
`HistoryFacts`, which the prompt renders (two sections) and the evidence floor reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class LabelBaseline:
    label: str
    days_seen: int  # of the last `days_observed` days, how many had this label on this camera in this local hour
    days_observed: int


@dataclass(frozen=True)
class CrossCameraEvent:
    camera_id: str
    ts: datetime
    labels: tuple[str, ...]
    risk_level: str | None  # that batch's stored verdict, when there is one
    seconds_before: float  # before this batch's start


@dataclass(frozen=True)
class HistoryFacts:
    camera_id: str
    timezone: str
    local_hour: int
    assumptions: tuple[str, ...]  # e.g. "no time zone in the profile: UTC assumed", "new camera: 2 days of history"
    days_observed: int
    enough_history: bool  # False: nothing is called unusual
    baselines: tuple[LabelBaseline, ...]
    unusual_labels: tuple[str, ...]  # batch labels rare at this hour on this camera (only when enough_history)
    recent_activity: tuple[CrossCameraEvent, ...]  # other cameras, in time order
    path_to_entry: tuple[str, ...]  # camera ids along the profile's neighbour path ending here, () if none
