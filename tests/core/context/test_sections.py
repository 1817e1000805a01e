"""The one table of sections: enrichment types, prompt sections, removal order and quality levels all derive from it."""

from typing import get_args

from hsi_dagster.core.context import enrichment, sections
from hsi_dagster.core.context.sections import (
    ENRICHMENT_TYPES,
    FULL_REMOVAL_ORDER,
    HISTORY_SECTIONS,
    LATE_REMOVAL_ORDER,
    NEVER_REMOVED,
    QUALITY_LEVEL_TYPES,
    QUALITY_LEVELS,
    SECTION_KEYS,
    SECTION_TITLES,
    SECTIONS,
)
from hsi_dagster.core.prompt import budget
from hsi_dagster.core.prompt import messages as prompt
from hsi_dagster.settings import QualityLevel


def test_every_module_uses_the_one_definition():
    assert prompt.SECTION_KEYS is SECTION_KEYS and prompt.SECTION_TITLES is SECTION_TITLES
    assert enrichment.ENRICHMENT_TYPES is ENRICHMENT_TYPES and enrichment.QUALITY_LEVEL_TYPES is QUALITY_LEVEL_TYPES
    assert budget.FULL_REMOVAL_ORDER is FULL_REMOVAL_ORDER and tuple(budget.SHORTEN_ORDER) == NEVER_REMOVED


def test_prompt_order_titles_and_enrichment_types():
    assert SECTION_KEYS[:4] == ("detections", "scene", "florence", "clip")
    assert len(set(SECTION_KEYS)) == len(SECTIONS) and len(set(SECTION_TITLES.values())) == len(SECTIONS)
    not_enrichment = ("detections", "scene", "household", *HISTORY_SECTIONS)
    assert tuple(key for key in SECTION_KEYS if key not in not_enrichment) == ENRICHMENT_TYPES
    assert SECTION_KEYS[-2:] == HISTORY_SECTIONS  # the household's own history closes the batch's evidence
    assert set(enrichment.OBSERVATION_FIELDS) == set(ENRICHMENT_TYPES) - {"florence", "clip"}


def test_the_static_instructions_name_every_section_in_prompt_order():
    listed = prompt.STATIC_SYSTEM_PROMPT.split("sections: ", 1)[1].split(". A section", 1)[0]
    assert listed == "Detections (always), and when available " + ", ".join(SECTION_TITLES[k] for k in SECTION_KEYS[1:])


def test_every_section_is_either_removed_in_order_or_shortened():
    assert set(FULL_REMOVAL_ORDER) | set(LATE_REMOVAL_ORDER) | set(NEVER_REMOVED) == set(SECTION_KEYS)
    assert len(FULL_REMOVAL_ORDER) + len(LATE_REMOVAL_ORDER) + len(NEVER_REMOVED) == len(SECTION_KEYS)
    assert NEVER_REMOVED == ("detections", "florence")
    assert LATE_REMOVAL_ORDER == ("cross_camera", "baseline") and budget.LATE_REMOVAL_ORDER is LATE_REMOVAL_ORDER


def test_quality_levels_nest_and_standard_leaves_out_the_first_removed_types():
    minimal, standard, full = (set(QUALITY_LEVEL_TYPES[level]) for level in QUALITY_LEVELS)
    assert minimal < standard < full == set(ENRICHMENT_TYPES)
    assert minimal == (set(NEVER_REMOVED) & set(ENRICHMENT_TYPES)) | {"reid"}  # identity is never optional
    first_removed = [key for key in FULL_REMOVAL_ORDER if key in ENRICHMENT_TYPES][: len(full - standard)]
    assert full - standard == set(first_removed) == {"depth", "pose", "action", "pet"}
    for level in QUALITY_LEVELS:  # each level lists its types in prompt order
        assert list(QUALITY_LEVEL_TYPES[level]) == [k for k in SECTION_KEYS if k in QUALITY_LEVEL_TYPES[level]]


def test_the_setting_accepts_exactly_the_defined_quality_levels():
    assert set(get_args(QualityLevel)) == set(QUALITY_LEVELS) == set(get_args(sections.QualityLevel))
