"""The cross-camera labeled set (synthetic/visit_situations.py) as the evaluation engine runs it, and its figures.

Its batches are scenarios of the project's format with a `situation` each; a pass judges every batch (with visits:
linked in time order within its situation, evaluation/visit_floors.py) and `combine_by_situation` makes one result
per situation, its loudest batch, as a household is told once by the loudest verdict. `situation_rows` gives recall
(high + critical) over the threats and false alarms over the harmless situations in their own rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from hsi_dagster.core.evaluation.metrics import ALERT_LEVELS, ScenarioResult
from hsi_dagster.synthetic.scenarios import Scenario, ScenarioFileError, load_scenarios
from hsi_dagster.synthetic.visit_situations import HARMLESS, THREAT, VISITS_PATH

SET_NAME = "visits"  # `hsi eval --set visits`; stored as `visits.<configuration>`
ORDER = ("low", "medium", "high", "critical")


def load_visit_set(
    path: str | Path = VISITS_PATH, *, split: str | None = None, ids: Sequence[str] = ()
) -> list[Scenario]:
    """The set's batches (every one with a situation and a kind); `split` / `ids` (situation or batch ids) keep
    those situations whole."""
    scenarios = load_scenarios(path)
    for scenario in scenarios:
        if scenario.situation is None or kind_of(scenario) not in (THREAT, HARMLESS):
            raise ScenarioFileError(
                f"{path}: {scenario.scenario_id} needs a `situation` and a category '<threat|harmless>:<situation>'"
            )
    situations = {s.situation for s in scenarios}
    unknown = sorted(set(ids) - situations - {s.scenario_id for s in scenarios})
    if unknown:
        raise ScenarioFileError(f"unknown situation or batch id(s): {', '.join(unknown)}")
    wanted = {s.situation for s in scenarios if not ids or s.situation in ids or s.scenario_id in ids}
    return [s for s in scenarios if s.situation in wanted and (split is None or s.split == split)]


def kind_of(item: Scenario | ScenarioResult) -> str:
    return item.category.split(":", 1)[0]


def situation_of(result: ScenarioResult) -> str:
    return result.scenario_id.rsplit(".b", 1)[0]


def _rank(level: str | None) -> int:
    return ORDER.index(level) if level in ORDER else -1


def combine_by_situation(configuration: str, results: Sequence[ScenarioResult]) -> list[ScenarioResult]:
    """One result per situation, in the set's order: its household level (the highest of its batches' labels) and
    its loudest batch's verdict, the per-batch levels in the summary."""
    by_situation: dict[str, list[ScenarioResult]] = {}
    for result in results:
        by_situation.setdefault(situation_of(result), []).append(result)
    combined = []
    for situation, members in by_situation.items():
        members = sorted(members, key=lambda r: r.scenario_id)
        expected = max((r.expected_level for r in members), key=_rank)
        best = max(members, key=lambda r: (r.predicted is not None, r.risk_score if r.risk_score is not None else -1))
        got = " -> ".join(r.predicted or r.status for r in members)
        wanted = " -> ".join(r.expected_level for r in members)
        combined.append(
            replace(
                best,
                configuration=configuration,
                scenario_id=situation,
                expected_level=expected,
                band_low=min(r.band_low for r in members if r.expected_level == expected),
                band_high=max(r.band_high for r in members if r.expected_level == expected),
                summary=f"batches {got} (household {wanted}); loudest: {best.summary or ''}",
            )
        )
    return combined


@dataclass(frozen=True)
class SituationRows:
    threats: int
    caught: int  # threats whose loudest batch is high or critical
    harmless: int
    false_alarms: int  # harmless situations raised to high or critical
    harmless_above_low: int  # harmless situations raised to medium or more
    correct: int  # situations whose loudest level is the household's
    situations: int

    def lines(self) -> list[str]:
        def pct(n: int, d: int) -> str:
            return f"{n} of {d}" + (f" ({n / d:.0%})" if d else "")

        return [
            f"recall(high+critical), threats: {pct(self.caught, self.threats)}",
            f"false alarms (high+critical), harmless: {pct(self.false_alarms, self.harmless)}; "
            f"raised above low: {pct(self.harmless_above_low, self.harmless)}",
            f"level accuracy, situations: {pct(self.correct, self.situations)}",
        ]


def situation_rows(combined: Sequence[ScenarioResult]) -> SituationRows:
    threats = [r for r in combined if kind_of(r) == THREAT]
    harmless = [r for r in combined if kind_of(r) == HARMLESS]
    return SituationRows(
        threats=len(threats),
        caught=sum(r.predicted in ALERT_LEVELS for r in threats),
        harmless=len(harmless),
        false_alarms=sum(r.predicted in ALERT_LEVELS for r in harmless),
        harmless_above_low=sum(_rank(r.predicted) > 0 for r in harmless),
        correct=sum(r.predicted == r.expected_level for r in combined),
        situations=len(combined),
    )
