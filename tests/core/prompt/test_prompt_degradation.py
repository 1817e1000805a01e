"""Past the section removals and the shortening, the prompt degrades in a fixed order so that every batch is
assessed (issue #15 item 10); what is left at the end is the floor. Pure: cl100k counts, no server."""

from __future__ import annotations

import pytest

from hsi_dagster.core.context.camera_profiles import camera_profile_text
from hsi_dagster.core.context.enrichment import build_context
from hsi_dagster.core.prompt.budget import (
    DEGRADATION_ORDER,
    FLORENCE_LINES,
    FULL_REMOVAL_ORDER,
    PromptTooLarge,
    fit_to_budget,
    prompt_floor,
)
from hsi_dagster.core.prompt.messages import (
    BRIEF_LABELS,
    STATIC_INSTRUCTIONS,
    STATIC_SYSTEM_PROMPT,
    Section,
    build_sections,
)
from hsi_dagster.core.prompt.tokens import TokenCounter
from hsi_dagster.settings import EXAMPLE_CAMERAS_PATH, HsiSettings, load_camera_profiles
from hsi_dagster.steps import budget_for
from tests.support.rich_batches import batch_and_detections


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter()


@pytest.fixture(scope="module")
def garage() -> tuple[str, list[Section], str]:
    """The batch of the issue: 6 persons at night in the garage, 64 Florence regions each, the garage profile."""
    batch, detections = batch_and_detections(6, 64)
    context = build_context(batch, detections, quality_level="full", clip_noise_threshold=0.2)
    profile = camera_profile_text(load_camera_profiles(EXAMPLE_CAMERAS_PATH)["garage"])
    return batch["batch_id"], build_sections(context), profile


def florence_block(user: str) -> str:
    return user.split("## Florence-2 captions\n", 1)[1].split("</camera_data>", 1)[0]


def detections_block(user: str) -> str:
    return user.split("## Detections\n", 1)[1].split("</camera_data>", 1)[0]


def test_the_batch_of_the_issue_fits_the_slot_of_its_settings(garage, counter) -> None:
    """CTX_SIZE=8192, PARALLEL=2, default output and margin: 1,888 cl100k tokens; it needed 2,114 at its old floor."""
    batch_id, sections, profile = garage
    settings = HsiSettings(_env_file=None, CTX_SIZE=8192, PARALLEL=2)  # type: ignore[call-arg]
    choice = budget_for(settings, None)
    assert choice.estimate_budget == 1888
    fitted = fit_to_budget(sections, profile, choice.estimate_budget, counter, batch_id=batch_id)
    assert fitted.tokens_after <= 1888
    assert fitted.degraded == [FLORENCE_LINES]
    assert fitted.messages[0]["content"] == STATIC_SYSTEM_PROMPT  # the cached prefix is kept at this step
    assert abs(fitted.tokens_after - counter.count_messages(fitted.messages)) <= TokenCounter.MESSAGE_OVERHEAD


def test_the_steps_come_in_the_fixed_order_as_the_budget_shrinks(garage, counter) -> None:
    batch_id, sections, profile = garage
    floor = prompt_floor(sections, profile, counter)
    seen: list[list[str]] = []
    for budget in range(2200, floor - 1, -8):
        fitted = fit_to_budget(sections, profile, budget, counter, batch_id=batch_id)
        assert fitted.tokens_after <= budget
        assert fitted.degraded == list(DEGRADATION_ORDER[: len(fitted.degraded)])  # always a prefix of the order
        if fitted.degraded:
            # every removable section went first
            assert fitted.sections_removed == [k for k in FULL_REMOVAL_ORDER if k in {x.key for x in sections}]
        if not seen or seen[-1] != fitted.degraded:
            seen.append(fitted.degraded)
    assert seen == [list(DEGRADATION_ORDER[:n]) for n in range(len(DEGRADATION_ORDER) + 1)]


def test_each_step_does_what_it_says(garage, counter) -> None:
    batch_id, sections, profile = garage
    floor = prompt_floor(sections, profile, counter)
    at: dict[int, object] = {}
    for budget in range(2200, floor - 1, -4):
        fitted = fit_to_budget(sections, profile, budget, counter, batch_id=batch_id)
        at.setdefault(len(fitted.degraded), fitted)
    user = {n: f.messages[1]["content"] for n, f in at.items()}  # type: ignore[attr-defined]
    system = {n: f.messages[0]["content"] for n, f in at.items()}  # type: ignore[attr-defined]
    # 1: Florence down to its header and a count per label; the detections keep lines
    assert "\n- " not in florence_block(user[1]) and "(6 more captioned detections not listed" in florence_block(
        user[1]
    )
    assert "\n- " in detections_block(user[1])
    # 2: the detections down to their header (tracks, zones and all) and a count
    assert "\n- " not in detections_block(user[2]) and "(6 more detections not listed" in detections_block(user[2])
    assert "tracks: " in detections_block(user[2]) and "zones: " in detections_block(user[2])
    assert system[2] == STATIC_SYSTEM_PROMPT
    # 3: the worked examples go; the instructions (schema, calibration, injection rules) stay
    assert system[3] == STATIC_INSTRUCTIONS and "# Examples" not in system[3] and "# Output" in system[3]
    assert STATIC_SYSTEM_PROMPT.startswith(system[3])
    # 4: the brief header: who, when, labels, confidence; no tracks or zones
    brief = detections_block(user[4])
    assert "tracks: " not in brief and "zones: " not in brief and "enrichment: quality" not in brief
    assert 'labels: "person" 6' in brief and "confidence: min 0.62" in brief and "02:40:05" in brief
    assert "6 detections, closed by idle" in brief


def test_below_the_floor_the_error_carries_the_floor(garage, counter) -> None:
    batch_id, sections, profile = garage
    floor = prompt_floor(sections, profile, counter)
    fitted = fit_to_budget(sections, profile, floor, counter, batch_id=batch_id)
    assert fitted.degraded == list(DEGRADATION_ORDER) and fitted.tokens_after == floor
    with pytest.raises(PromptTooLarge) as info:
        fit_to_budget(sections, profile, floor - 1, counter, batch_id=batch_id)
    assert info.value.minimum_tokens == floor and info.value.budget == floor - 1
    assert "even at its floor" in str(info.value) and "hsi config check" in str(info.value)
    # the floor is small next to the static prompt: the instructions are most of it
    assert counter.count_static(STATIC_INSTRUCTIONS) < floor < counter.count_static(STATIC_SYSTEM_PROMPT) + 200


def test_the_brief_header_is_bounded_whatever_the_labels(counter) -> None:
    batch, detections = batch_and_detections(12, 2)
    for n, detection in enumerate(detections):
        detection["label"] = f"label-{n}"
    context = build_context(batch, detections, quality_level="full", clip_noise_threshold=0.2)
    detections_section = build_sections(context)[0]
    brief = detections_section.headers_only(brief=True).text
    labels_line = next(line for line in brief.splitlines() if line.startswith("labels: "))
    assert labels_line.count('"label-') == BRIEF_LABELS and labels_line.endswith(f"{12 - BRIEF_LABELS} more labels")


def test_a_roomy_budget_changes_nothing(garage, counter) -> None:
    batch_id, sections, profile = garage
    fitted = fit_to_budget(sections, profile, 20_000, counter, batch_id=batch_id)
    assert fitted.degraded == [] and fitted.sections_removed == [] and fitted.static_prefix == STATIC_SYSTEM_PROMPT
