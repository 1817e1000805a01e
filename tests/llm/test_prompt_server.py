"""Budgeted prompts on the REAL embedded server: they fit the slot as sent, and the static prefix is cached."""

import random

import pytest

from hsi_dagster.core.context.enrichment import build_context
from hsi_dagster.core.prompt.budget import fit_to_budget
from hsi_dagster.core.prompt.messages import build_sections
from hsi_dagster.core.prompt.risk_schema import RISK_JSON_SCHEMA
from hsi_dagster.core.prompt.slot_budget import prompt_budget
from hsi_dagster.core.prompt.tokens import TokenCounter
from hsi_dagster.llm.client import LlamaClient
from hsi_dagster.settings import HsiSettings
from hsi_dagster.synthetic.batches import synthetic_batch

pytestmark = pytest.mark.llm
MAX_OUTPUT = 256
MARGIN = 256


def budgeted(rng: random.Random, n_detections: int, budget: int, ratio: float):
    batch, detections = synthetic_batch(rng, n_detections=n_detections)
    context = build_context(batch, detections, quality_level="full", clip_noise_threshold=0.2)
    return fit_to_budget(build_sections(context), "", int(budget / ratio), TokenCounter(), batch_id=batch["batch_id"])


def test_every_budgeted_prompt_fits_the_slot_as_sent_including_oversized_batches(llama_server):
    ratio = HsiSettings.model_fields["PROMPT_TOKEN_RATIO"].default
    with LlamaClient(llama_server.url) as client:
        slot = client.server_info().slot_context
        budget = prompt_budget(slot, MAX_OUTPUT, MARGIN)
        rng = random.Random(3)
        sizes = [1, 3, 8, 20, 40, 80, 120, 200]  # the last ones are far over a 4096-token slot before budgeting
        fitted = [budgeted(rng, n, budget, ratio) for n in sizes]
        assert any(f.sections_removed for f in fitted) and any(f.sections_shortened for f in fitted)
        assert max(f.tokens_before for f in fitted) > slot  # really oversized before budgeting
        for f in fitted:  # exact counts of the served model for every prompt
            assert client.count_prompt_tokens(f.messages) <= budget
        for f in (fitted[0], fitted[-1]):  # and real requests are accepted as is
            reply = client.chat_json(f.messages, RISK_JSON_SCHEMA, max_tokens=8)
            assert reply.usage.prompt_tokens <= budget


def test_static_prefix_is_byte_identical_and_cached_by_the_server(llama_server):
    ratio = HsiSettings.model_fields["PROMPT_TOKEN_RATIO"].default
    rng = random.Random(11)
    with LlamaClient(llama_server.url) as client:
        budget = prompt_budget(client.server_info().slot_context, MAX_OUTPUT, MARGIN)
        first, second = budgeted(rng, 6, budget, ratio), budgeted(rng, 9, budget, ratio)
        assert first.messages[0] == second.messages[0] and first.static_prefix == second.static_prefix
        assert first.messages[1] != second.messages[1]
        # The exact number of leading tokens the two prompts share, as the served model tokenizes them.
        tokens = [client.prompt_token_ids(p.messages) for p in (first, second)]
        shared = next((i for i, (a, b) in enumerate(zip(*tokens, strict=False)) if a != b), min(map(len, tokens)))
        assert shared > 1000
        client.chat_json(first.messages, RISK_JSON_SCHEMA, max_tokens=8)
        reply = client.chat_json(second.messages, RISK_JSON_SCHEMA, max_tokens=8)
        assert reply.usage.cached_tokens >= shared - 64
