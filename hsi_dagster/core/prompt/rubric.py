"""The rubric: yes/no questions the model answers about what it observed, and the score code derives from them.

In the rubric output schema (ASSESSMENT_SCHEMA=rubric, core/prompt/risk_schema.py) the model writes its observations,
then answers these questions, and only then its own score. The score that counts as the model's (`model_score`, before
the evidence floor, core/verdict/final.py) is `rubric_score(answers)`: a small model asked for a number copies the first
worked example's number; asked "does anyone try a door?", it has to look at the batch. The model's own number is
kept in the stored assessment for comparison.

Only violence and forcing count whoever does them; the other signs count with an unknown person (a resident opening
their own door or carrying their own hedge shears is not a sign). The table (one row per question; the rubric score
is the highest row that fires, plus `EXTRA_PER_SIGN` for every further sign, capped at 100):

question                 | yes alone                     | score
-------------------------|-------------------------------|---------
violence                 | fighting, hitting, a struggle | 90 critical
forced_entry_or_damage   | forcing, breaking, damage     | 85 critical
carries_tool_or_weapon   | with unknown_person           | 70 high (with tries_door_or_window: 85 critical)
tries_door_or_window     | with unknown_person           | 65 high
takes_property           | with unknown_person           | 65 high
face_concealed           | with unknown_person           | 45 medium (with loiters: 55)
loiters                  | with unknown_person           | 40 medium
unknown_person           | a person not known here       | 20 low
(none)                   |                               | 5 low
"""

from __future__ import annotations

from collections.abc import Mapping

RUBRIC_QUESTIONS: tuple[tuple[str, str], ...] = (
    ("unknown_person", "Is a person present who is not recognised as a resident, guest or expected worker?"),
    ("tries_door_or_window", "Does anyone try a door, window, gate or car handle, or look into a car or window?"),
    ("carries_tool_or_weapon", "Does anyone carry a weapon, or a tool towards a lock, door or window?"),
    ("face_concealed", "Is a face deliberately hidden (mask, balaclava, hood up with face covering)?"),
    ("forced_entry_or_damage", "Is anything being forced, broken or damaged?"),
    ("violence", "Is anyone fighting, hitting or attacking?"),
    ("takes_property", "Does anyone take or carry away property that is not theirs (parcels, bikes, tools)?"),
    ("loiters", "Does an unknown person linger at the property for a minute or more without an evident reason?"),
)
RUBRIC_KEYS: tuple[str, ...] = tuple(key for key, _ in RUBRIC_QUESTIONS)

NOTHING, UNKNOWN_PERSON, LOITERS, FACE_CONCEALED, FACE_CONCEALED_LOITERS = 5, 20, 40, 45, 55
TRIES, TAKES, TOOL, TOOL_AT_ENTRY, FORCED, VIOLENCE = 65, 65, 70, 85, 85, 90
EXTRA_PER_SIGN = 3


def _fired(answers: Mapping[str, bool]) -> list[int]:
    yes = {key for key in RUBRIC_KEYS if answers.get(key) is True}
    unknown = "unknown_person" in yes
    rows = [
        VIOLENCE if "violence" in yes else 0,
        FORCED if "forced_entry_or_damage" in yes else 0,
        (TOOL_AT_ENTRY if "tries_door_or_window" in yes else TOOL)
        if unknown and "carries_tool_or_weapon" in yes
        else 0,
        TRIES if unknown and "tries_door_or_window" in yes else 0,
        TAKES if unknown and "takes_property" in yes else 0,
        (FACE_CONCEALED_LOITERS if "loiters" in yes else FACE_CONCEALED) if unknown and "face_concealed" in yes else 0,
        LOITERS if unknown and "loiters" in yes else 0,
        UNKNOWN_PERSON if unknown else 0,
    ]
    return [score for score in rows if score]


def rubric_score(answers: Mapping[str, bool]) -> int:
    """The score of the answers (table above); a missing or non-boolean answer counts as no."""
    fired = sorted(_fired(answers), reverse=True)
    if not fired:
        return NOTHING
    return min(100, fired[0] + EXTRA_PER_SIGN * (len(fired) - 1))


def rubric_yes(answers: Mapping[str, bool]) -> list[str]:
    """The questions answered yes, in rubric order (for summaries and reports)."""
    return [key for key in RUBRIC_KEYS if answers.get(key) is True]


RUBRIC_JSON_SCHEMA: dict = {
    "type": "object",
    "properties": {key: {"type": "boolean"} for key in RUBRIC_KEYS},
    "required": list(RUBRIC_KEYS),
    "additionalProperties": False,
}


def rubric_prompt_lines() -> str:
    """The questions as the system prompt lists them (one line each)."""
    return "".join(f"  - {key}: {question}\n" for key, question in RUBRIC_QUESTIONS)
