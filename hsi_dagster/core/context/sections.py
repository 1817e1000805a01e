"""The prompt's sections, defined once. Everything else derives from `SECTIONS`:

- the prompt order and titles (`core/prompt/messages.py`: SECTION_KEYS, SECTION_TITLES, the list in the static
instructions);
- the enrichment types, i.e. the vision models' payload keys that are requested and summarised
  (`core/context/enrichment.py`: ENRICHMENT_TYPES, OBSERVATION_FIELDS for the types rendered generically);
- the quality levels, i.e. which enrichment types each level uses (`QUALITY_LEVEL_TYPES`);
- the removal order when a prompt is over budget (`core/prompt/budget.py`: FULL_REMOVAL_ORDER); sections without a
  removal rank are never removed, only shortened.

Why these values: `detections` is the core evidence and `florence` captions the primary visual evidence, so both
stay at every level and are shortened, never removed. `scene` comes from the detector's own payload, not a
separate model, so it is always included but is the last section removed. The removal order is the reference
system's (depth first: the least change to a risk judgement), with `clip` right before `scene` (CLIP classes are a
noisy second opinion that Florence captions mostly cover). The "standard" level leaves out the four types removed
first (depth, pose, action, pet); "minimal" keeps what is never removed and re-identification (who a recogniser
matched: identity is not optional, a resident must not become a stranger at night because the level is low).

The `household` section (the household's corrections of the most similar earlier batches of this camera, worked
examples of its own judgement: core/context/household_examples.py) says nothing about this batch itself, so it is
the first section removed under budget pressure.

The two history sections (`baseline`: what this camera usually sees at this hour; `cross_camera`: what the other
cameras saw just before; core/context/history.py) come from the household's own database, not a vision model, so they
are in every quality level. They are worth more than most caption lines: a few lines saying "person: 0 of 14 nights
at this hour" or "street -> driveway -> here in 5 minutes" change a judgement more than a third dense caption of
the same person. So they are removed late (`late_removal`): only once every other removable section is gone AND
Florence cannot keep `HISTORY_OUTRANKS_FLORENCE_LINES` captioned lines (core/prompt/budget.py), cross-camera first (the
longer one), the baseline last.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

QualityLevel = Literal["minimal", "standard", "full"]
QUALITY_LEVELS: tuple[QualityLevel, ...] = ("minimal", "standard", "full")  # each includes the ones before it


@dataclass(frozen=True)
class SectionSpec:
    key: str  # the section key; for an enrichment type also its payload key in `detection.enrichment`
    title: str  # the `## Title` of the prompt section
    enrichment: bool  # a vision model's output (requested by type), not the detector's own record
    level: QualityLevel  # the lowest quality level that includes it
    removal_rank: int | None  # order of removal when over budget (1 = first); None = never removed, shortened
    fields: tuple[str, ...] = ()  # contract section 1 keys of a type rendered generically, one line per track
    batch_scoped: bool = False  # one observation for the whole scene, not one per track
    late_removal: bool = False  # removed only after Florence is down to HISTORY_OUTRANKS_FLORENCE_LINES lines


# In prompt order.
SECTIONS: tuple[SectionSpec, ...] = (
    SectionSpec("detections", "Detections", enrichment=False, level="minimal", removal_rank=None),
    SectionSpec("scene", "Scene analysis", enrichment=False, level="minimal", removal_rank=12),
    SectionSpec("florence", "Florence-2 captions", enrichment=True, level="minimal", removal_rank=None),
    SectionSpec("clip", "CLIP classes", enrichment=True, level="standard", removal_rank=11),
    SectionSpec("pose", "Pose", True, "full", 3, fields=("posture", "score")),
    SectionSpec("action", "Action recognition", True, "full", 4, fields=("label", "score")),
    SectionSpec("pet", "Pet classification", True, "full", 5, fields=("species", "score")),
    SectionSpec("weather", "Weather", True, "standard", 6, fields=("condition", "visibility"), batch_scoped=True),
    SectionSpec("vehicle", "Vehicles", True, "standard", 7, fields=("type", "color", "plate", "damage")),
    SectionSpec("clothing", "Clothing", True, "standard", 8, fields=("description", "suspicious")),
    SectionSpec("violence", "Violence detection", True, "standard", 9, fields=("score",)),
    # identity is not an optional enrichment (issue 40): a recognised face or plate is read at every level, else a
    # resident is a stranger at night under "minimal"
    SectionSpec("reid", "Re-identification", True, "minimal", 10, fields=("identity", "known", "seen_before", "score")),
    SectionSpec("depth", "Depth", True, "full", 2, fields=("distance_m",)),
    # the household's corrections of similar batches (core/context/household_examples.py): a precedent, not evidence
    # of this batch, so the first section to go under budget pressure
    SectionSpec("household", "Household corrections of similar batches", False, "minimal", 1),
    SectionSpec("baseline", "Usual activity at this hour", False, "minimal", 14, late_removal=True),
    SectionSpec("cross_camera", "Other cameras just before", False, "minimal", 13, late_removal=True),
)
HISTORY_SECTIONS: tuple[str, ...] = ("baseline", "cross_camera")
HISTORY_OUTRANKS_FLORENCE_LINES = 2  # Florence keeps this many captioned lines before a history section goes

SECTION_KEYS: tuple[str, ...] = tuple(spec.key for spec in SECTIONS)
SECTION_TITLES: dict[str, str] = {spec.key: spec.title for spec in SECTIONS}
ENRICHMENT_TYPES: tuple[str, ...] = tuple(spec.key for spec in SECTIONS if spec.enrichment)
QUALITY_LEVEL_TYPES: dict[str, tuple[str, ...]] = {
    level: tuple(
        spec.key
        for spec in SECTIONS
        if spec.enrichment and QUALITY_LEVELS.index(spec.level) <= QUALITY_LEVELS.index(level)
    )
    for level in reversed(QUALITY_LEVELS)
}
_RANKED = sorted((s for s in SECTIONS if s.removal_rank is not None), key=lambda s: s.removal_rank or 0)
FULL_REMOVAL_ORDER: tuple[str, ...] = tuple(spec.key for spec in _RANKED if not spec.late_removal)
LATE_REMOVAL_ORDER: tuple[str, ...] = tuple(spec.key for spec in _RANKED if spec.late_removal)
NEVER_REMOVED: tuple[str, ...] = tuple(spec.key for spec in SECTIONS if spec.removal_rank is None)
OBSERVATION_FIELDS: dict[str, tuple[str, ...]] = {spec.key: spec.fields for spec in SECTIONS if spec.fields}
BATCH_SCOPED_TYPES: frozenset[str] = frozenset(spec.key for spec in SECTIONS if spec.batch_scoped)
