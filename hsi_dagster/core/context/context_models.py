"""The enriched context's shape: the pydantic models a batch's context is made of (core/context/enrichment.py builds
them; the prompt renders them; `enriched_contexts.context` stores `EnrichedContext.to_json()`).

Pure code (no Dagster, no I/O)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from hsi_dagster.core.context.camera_profiles import CameraProfile
from hsi_dagster.core.context.history import HistoryFacts
from hsi_dagster.core.context.sections import QualityLevel


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BatchInfo(_Model):
    batch_id: str
    camera_id: str
    started_at: datetime
    last_ts: datetime
    closes_at: datetime | None = None
    close_reason: str
    detection_count: int


class DetectionItem(_Model):
    detection_id: str
    ts: datetime
    label: str
    confidence: float
    zone: str | None = None
    zones: list[str] = Field(default_factory=list)  # every zone it is in (Frigate's current_zones), else [zone]
    track_id: str | None = None
    is_late: bool = False
    fast_path: bool = False


class TrackSummary(_Model):
    track_id: str
    labels: dict[str, int]
    first_ts: datetime
    last_ts: datetime
    dwell_s: float
    detections: int
    zones: list[str]
    max_confidence: float
    # What the detector says of the whole track (Frigate's payloads, enrichment.frigate; core/frigate/identity.py):
    entered_zones: list[str] = Field(default_factory=list)  # every zone it entered in its life, not only here
    tracked_since: datetime | None = None  # the track's start (Frigate's start_time), maybe before this batch
    tracked_s: float = 0.0  # tracked_since .. the last detection here: its time in view, skipped updates included
    stationary: bool = False  # at its last detection here
    travel: float = 0.0  # how far its box centre moved from where it was first seen here (normalised frame units)
    attributes: dict[str, float] = Field(default_factory=dict)  # face, license_plate, courier logos: best score
    delivery: str | None = None  # a courier's logo was seen (a uniform or a van: a context, never an identity)
    plates: list[str] = Field(default_factory=list)  # plates read (LPR); known or not is the floor's question
    sub_labels: list[str] = Field(default_factory=list)  # "<name> (<kind>)" of sub_labels that are no identity


class DetectionsSummary(_Model):
    count: int
    late_count: int
    by_label: dict[str, int]
    confidence_min: float | None
    confidence_max: float | None
    confidence_mean: float | None
    zones: dict[str, int]
    tracks: list[TrackSummary]
    first_ts: datetime | None
    last_ts: datetime | None
    span_s: float
    timezone: str
    local_start: str | None  # "YYYY-MM-DD HH:MM:SS" in the camera's zone
    local_end: str | None
    time_of_day: Literal["night", "morning", "afternoon", "evening"] | None
    lighting: str | None  # majority scene lighting (day|dusk|night) when the scene model reported it
    is_dark: bool
    items: list[DetectionItem]


class SceneSummary(_Model):
    descriptions: list[str]
    lighting: dict[str, int]
    indoor: bool | None


class GroupRef(_Model):
    """Who an observation is about: a track, or one untracked detection; plus what ranks it when shortening."""

    track_id: str | None
    detection_ids: list[str]
    label: str
    max_confidence: float
    fast_path: bool = False
    late: bool = False


class RegionCaption(_Model):
    label: str
    caption: str


class FlorenceEntry(GroupRef):
    ts: datetime
    captions: list[str] = Field(default_factory=list)
    dense_captions: list[str] = Field(default_factory=list)
    regions: list[RegionCaption] = Field(default_factory=list)


class FlorenceSummary(_Model):
    entries: list[FlorenceEntry]
    regions_total: int = 0
    regions_dropped_repeat: int = 0
    duplicates_dropped: int = 0


class ClipClass(_Model):
    label: str
    score: float


class ClipEntry(GroupRef):
    classes: list[ClipClass]


class ClipSummary(_Model):
    threshold: float
    entries: list[ClipEntry]
    dropped_below_threshold: int = 0


class NumberRange(_Model):
    min: float
    max: float
    first: float
    last: float
    # The highest readings, highest first (at most TOP_READINGS): lets the evidence floor count how many frames of a
    # track reached a threshold (sustained violence, not one noisy frame) without storing every frame.
    top: list[float] = Field(default_factory=list)


class Observation(GroupRef):
    fields: dict[str, str | bool | None]
    numbers: dict[str, NumberRange] = Field(default_factory=dict)
    count: int


class ReviewFacts(_Model):
    """A Frigate review item whose time span overlaps the batch (core/frigate/reviews.py): its severity and, when its
    GenAI review summary arrived, that model's opinion. Evidence for the prompt, never for the floor."""

    review_id: str
    start: datetime
    end: datetime | None = None
    severity: str | None = None  # alert | detection | significant_motion
    threat_level: int | None = None  # potential_threat_level 0 normal, 1 suspicious, 2 critical
    objects: list[str] = Field(default_factory=list)
    zones: list[str] = Field(default_factory=list)
    title: str | None = None
    summary: str | None = None  # shortSummary
    scene: str | None = None
    observations: list[str] = Field(default_factory=list)
    other_concerns: list[str] = Field(default_factory=list)
    confidence: float | None = None


class HouseholdExample(_Model):
    """An earlier batch of this camera the household corrected, as a worked example for the prompt
    (core/context/household_examples.py picks them)."""

    local_time: str  # "HH:MM" local to the camera
    labels: list[str]
    zones: list[str]
    identities: list[str] = Field(default_factory=list)
    stored_level: str | None  # what hsi stored
    household_level: str  # what the household said
    note: str | None = None  # the household's note: free text, rendered as untrusted data


class EnrichedContext(_Model):
    batch: BatchInfo
    quality_level: QualityLevel
    types_included: list[str]
    missing_types: list[str]
    camera_profile: CameraProfile | None = None
    detections: DetectionsSummary
    scene: SceneSummary | None = None
    florence: FlorenceSummary | None = None
    clip: ClipSummary | None = None
    observations: dict[str, list[Observation]] = Field(default_factory=dict)
    history: HistoryFacts | None = None  # what is usual here and what the other cameras saw (core/context/history.py)
    reviews: list[ReviewFacts] = Field(default_factory=list)  # Frigate's review items over the batch's time span
    # the most similar corrected batches of this camera when the context was built (PROMPT_HOUSEHOLD_EXAMPLES)
    household_examples: list[HouseholdExample] = Field(default_factory=list)

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str | bytes) -> EnrichedContext:
        return cls.model_validate_json(text)
