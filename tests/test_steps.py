"""The pipeline's steps (hsi_dagster/steps.py) with real settings: the budget takes the live per-slot context as a
value and falls back to the settings' one (the same figure llama-server's options compute), the prompt and its floor
follow the configured output schema, and the floor reads the EVIDENCE_* settings."""

from __future__ import annotations

import os
import random

from hsi_dagster.core.prompt.budget import PromptTooLarge
from hsi_dagster.core.prompt.messages import static_prompt
from hsi_dagster.core.prompt.slot_budget import LIVE_BUDGET_SOURCE, SETTINGS_BUDGET_SOURCE
from hsi_dagster.llm.options import LlamaServerOptions
from hsi_dagster.settings import load_settings
from hsi_dagster.steps import (
    budget_for,
    configured_slot_context,
    context_for_batch,
    floor_for,
    prompt_floor_for,
    prompt_for,
)
from hsi_dagster.synthetic.batches import synthetic_batch


def test_the_budget_is_the_live_slot_when_given_else_the_settings_one() -> None:
    settings = load_settings(os.devnull, CTX_SIZE=12_000, PARALLEL=3, NEMOTRON_MAX_OUTPUT_TOKENS=1_000)
    assert configured_slot_context(settings) == 4_000
    assert configured_slot_context(settings) == LlamaServerOptions.from_settings(settings).slot_context
    live = budget_for(settings, 6_000)
    assert (live.slot_context, live.source, live.budget) == (6_000, LIVE_BUDGET_SOURCE, 6_000 - 1_000 - 256)
    fallback = budget_for(settings, None, max_output_tokens=500)
    assert (fallback.slot_context, fallback.source, fallback.budget) == (4_000, SETTINGS_BUDGET_SOURCE, 3_244)
    assert fallback.estimate_budget == int(3_244 / settings.PROMPT_TOKEN_RATIO)


def test_the_prompt_and_its_floor_follow_the_output_schema() -> None:
    batch, detections = synthetic_batch(random.Random(7), camera_id="driveway", n_detections=6)
    for schema in ("plain", "rubric"):
        settings = load_settings(os.devnull, ASSESSMENT_SCHEMA=schema)
        context = context_for_batch(batch, detections, settings, camera_profile=None)
        fitted = prompt_for(context, 20_000, schema, batch_id=batch["batch_id"])
        assert fitted.messages[0]["content"] == "".join(static_prompt(schema))
        floor = prompt_floor_for(context, schema)
        try:
            prompt_for(context, floor - 1, schema, batch_id=batch["batch_id"])
        except PromptTooLarge as exc:
            assert exc.minimum_tokens == floor
        else:
            raise AssertionError("a budget one token under the floor must not fit")
        assert prompt_for(context, floor, schema, batch_id=batch["batch_id"]).tokens_after == floor


def test_the_floor_reads_the_evidence_settings() -> None:
    batch, detections = synthetic_batch(random.Random(1), camera_id="garden", n_detections=3)
    detections[0]["label"] = detections[1]["label"] = "crowbar"
    detections[0]["confidence"] = detections[1]["confidence"] = 0.9
    default = load_settings(os.devnull)
    custom = load_settings(os.devnull, EVIDENCE_WEAPON_LABELS="crowbar")
    context = context_for_batch(batch, detections, default, camera_profile=None)
    assert floor_for(context, None, None, custom).score > floor_for(context, None, None, default).score
