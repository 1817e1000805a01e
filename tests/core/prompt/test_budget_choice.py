"""The budget choice: the server's live per-slot context first, else CTX_SIZE / PARALLEL; scaled by the token ratio."""

import pytest

from hsi_dagster.core.prompt.slot_budget import LIVE_BUDGET_SOURCE, SETTINGS_BUDGET_SOURCE, choose_budget

SETTINGS = {"configured_slot_context": 16_384, "max_output_tokens": 1_536, "safety_margin": 256, "token_ratio": 1.22}


def test_the_live_slot_context_wins_when_the_server_answers():
    choice = choose_budget(4_096, **SETTINGS)
    assert (choice.slot_context, choice.source) == (4_096, LIVE_BUDGET_SOURCE)
    assert choice.budget == 4_096 - 1_536 - 256 == 2_304
    assert choice.estimate_budget == int(2_304 / 1.22) == 1_888  # cl100k tokens the prompt is fitted to


@pytest.mark.parametrize("live", [None, 0])
def test_settings_when_the_server_does_not_say(live):
    choice = choose_budget(live, **SETTINGS)
    assert (choice.slot_context, choice.source) == (16_384, SETTINGS_BUDGET_SOURCE)
    assert choice.budget == 14_592 and choice.estimate_budget == int(14_592 / 1.22)


def test_a_ratio_above_one_shrinks_the_estimate_budget_and_below_one_widens_it():
    tight = choose_budget(None, **{**SETTINGS, "token_ratio": 1.5})
    loose = choose_budget(None, **{**SETTINGS, "token_ratio": 0.8})
    assert tight.estimate_budget < tight.budget < loose.estimate_budget
    assert tight.estimate_budget * 1.5 <= tight.budget  # the fitted prompt fits in the served model's tokens


def test_a_slot_with_no_prompt_room_or_a_bad_ratio_is_an_error():
    with pytest.raises(ValueError, match="no prompt room"):
        choose_budget(1_600, **SETTINGS)
    with pytest.raises(ValueError, match="token ratio"):
        choose_budget(None, **{**SETTINGS, "token_ratio": 0})
