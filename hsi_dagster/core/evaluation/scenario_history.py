"""A scenario's `history` JSON object <-> `HistoryInputs`: how the evaluation feeds production's history rules.

The evaluation engine builds the same `HistoryInputs` that `storage/history.py` reads from DuckDB, from the JSON a
labeled scenario carries, and calls the same `history_facts` (core/context/history.py), so `hsi eval` measures what
production computes. `history_inputs_to_json` writes a stored batch's inputs back as a scenario.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypedDict, Unpack

from hsi_dagster.core.context.history import (
    DayActivity,
    HistoryFacts,
    HistoryInputs,
    HistoryRules,
    RecentActivity,
    as_utc,
    history_facts,
)

DEFAULT_RULES = HistoryRules()  # the production defaults, as history_facts takes them


class HistoryInputError(ValueError):
    """A scenario's `history` JSON is malformed; the message names the field."""


def _day_numbers(value: Any, where: str) -> list[int]:
    """`days_ago`: an integer, or an inclusive range "1-14" (scenarios: the same day repeated)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, str) and "-" in value:
        lo, _, hi = value.partition("-")
        if lo.strip().isdigit() and hi.strip().isdigit():
            return list(range(int(lo), int(hi) + 1))
    raise HistoryInputError(f"{where}.days_ago: expected an integer or a range like '1-14', got {value!r}")


def _labels(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise HistoryInputError(f"{where}: expected a list of label strings, got {value!r}")
    return tuple(value)


def history_inputs_from_json(
    data: Mapping[str, Any],
    *,
    camera_id: str,
    batch_start: datetime,
    batch_labels: Iterable[str],
    timezone: str | None,
    rules: HistoryRules = DEFAULT_RULES,
) -> HistoryInputs:
    """A scenario's `history` object -> HistoryInputs. Shape (every key optional):

    {"timezone": "Europe/Paris",            # default: the scenario profile's (`timezone` argument)
     "days_requested": 14,                  # default: rules.days
     "days": [{"days_ago": "1-14", "labels_in_hour": ["person"]},   # days with any activity
              {"days_ago": 15, "labels_in_hour": []}],
     "recent": [{"camera_id": "street", "seconds_before": 240, "labels": ["person"], "risk_level": "low"}],
     "approached_from": {"back_door": ["driveway"], "driveway": ["street"]},
     "entry_points": ["back_door"],
     "former_camera_ids": ["garage_old"],
     "clock_jump_s": 7200}
    """
    if not isinstance(data, Mapping):
        raise HistoryInputError(f"history: expected an object, got {type(data).__name__}")
    unknown = set(data) - {
        "timezone",
        "days_requested",
        "days",
        "recent",
        "approached_from",
        "entry_points",
        "former_camera_ids",
        "clock_jump_s",
    }
    if unknown:
        raise HistoryInputError(f"history: unknown keys {sorted(unknown)}")
    start = as_utc(batch_start)
    by_day: dict[int, set[str]] = {}
    for i, day in enumerate(data.get("days", [])):
        where = f"history.days[{i}]"
        if not isinstance(day, Mapping):
            raise HistoryInputError(f"{where}: expected an object")
        for ago in _day_numbers(day.get("days_ago"), where):
            by_day.setdefault(ago, set()).update(_labels(day.get("labels_in_hour", []), f"{where}.labels_in_hour"))
    recent = []
    for i, event in enumerate(data.get("recent", [])):
        where = f"history.recent[{i}]"
        try:
            recent.append(
                RecentActivity(
                    str(event["camera_id"]),
                    start - timedelta(seconds=float(event["seconds_before"])),
                    _labels(event.get("labels", []), f"{where}.labels"),
                    event.get("risk_level"),
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise HistoryInputError(f"{where}: needs camera_id and a numeric seconds_before ({exc})") from None
    approached = data.get("approached_from", {})
    if not isinstance(approached, Mapping):
        raise HistoryInputError("history.approached_from: expected an object camera -> list of cameras")
    jump = data.get("clock_jump_s")
    return HistoryInputs(
        camera_id=camera_id,
        batch_start=start,
        batch_labels=tuple(batch_labels),
        timezone=data.get("timezone", timezone),
        days_requested=int(data.get("days_requested", rules.days)),
        days=tuple(DayActivity(ago, tuple(sorted(labels))) for ago, labels in sorted(by_day.items())),
        recent=tuple(recent),
        clock_jump_s=None if jump is None else float(jump),
        former_camera_ids=_labels(data.get("former_camera_ids", []), "history.former_camera_ids"),
        approached_from={str(k): _labels(v, f"history.approached_from.{k}") for k, v in approached.items()},
        entry_points=_labels(data.get("entry_points", []), "history.entry_points"),
    )


def history_inputs_to_json(inputs: HistoryInputs) -> dict[str, Any]:
    """The inverse of `history_inputs_from_json` (relative to the batch start): a stored batch as a scenario."""
    start = as_utc(inputs.batch_start)
    return {
        "timezone": inputs.timezone,
        "days_requested": inputs.days_requested,
        "days": [{"days_ago": d.days_ago, "labels_in_hour": list(d.labels_in_hour)} for d in inputs.days],
        "recent": [
            {
                "camera_id": r.camera_id,
                "seconds_before": round((start - as_utc(r.ts)).total_seconds(), 3),
                "labels": list(r.labels),
                "risk_level": r.risk_level,
            }
            for r in inputs.recent
        ],
        "approached_from": {k: list(v) for k, v in inputs.approached_from.items()},
        "entry_points": list(inputs.entry_points),
        "former_camera_ids": list(inputs.former_camera_ids),
        "clock_jump_s": inputs.clock_jump_s,
    }


class ScenarioBatch(TypedDict):
    """The batch a scenario's `history` object belongs to, as `history_inputs_from_json` takes it."""

    camera_id: str
    batch_start: datetime
    batch_labels: Iterable[str]
    timezone: str | None


def history_facts_from_json(
    data: Mapping[str, Any], *, rules: HistoryRules = DEFAULT_RULES, **batch: Unpack[ScenarioBatch]
) -> HistoryFacts:
    """What the evaluation engine calls for a scenario with `history`: the production rules on the scenario's inputs."""
    inputs = history_inputs_from_json(data, rules=rules, **batch)
    return history_facts(inputs, rules)
