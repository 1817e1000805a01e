"""Visits in an evaluation pass: the prepared scenarios' floors raised by their visits, the way the pipeline does it.

The pipeline (assets/visits.py, storage/visits.py, evaluation/stored_floor.py) links each batch's sighting into a
visit when its context is stored, raises the visit's own level to what its facts now justify (with the site's
earlier visits of the night), and the batch's floor starts from that level. Here the same pure steps run in memory,
per site, batch by batch in time order: `sighting_for`, `link` (core/visits/linking.py, time alone when there is no
identity), `visit_level_for`, `floor_with_visit`. A site is a scenario's `situation` (the cross-camera set: one
situation is one household's timeline) or the scenario alone (the project's set: each labeled batch is its own
situation, so nothing links across scenarios written on unrelated days).

The candidates are every visit of the site so far (link refuses those out of reach) and the earlier visits are what
`storage.visits.visits_before` reads: visits with a person not known that ended before this one began, within
EARLIER_WINDOW, oldest first, at most EARLIER_LIMIT. A visit's level is only ever raised, as `record_visit_level`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC

from hsi_dagster.core.verdict.visit_rules import EARLIER_WINDOW
from hsi_dagster.core.visits.linking import Visit, VisitRules, link
from hsi_dagster.evaluation.scenario_run import PreparedScenario
from hsi_dagster.settings import HsiSettings
from hsi_dagster.steps import floor_with_visit, sighting_for, visit_level_for

EARLIER_LIMIT = 5  # storage.visits.visits_before's default


def site_of(prepared: PreparedScenario) -> str:
    scenario = prepared.scenario
    return scenario.situation if scenario.situation is not None else f"scenario:{scenario.scenario_id}"


def _started(prepared: PreparedScenario) -> str:
    """The batch's start as a sortable UTC instant (the stored context's; the scenario's text without one)."""
    if prepared.context is not None:
        return prepared.context.batch.started_at.astimezone(UTC).isoformat()
    return str(prepared.scenario.batch["started_at"])


def _earlier(visits: Sequence[Visit], visit: Visit) -> list[Visit]:
    """The site's visits of a person not known that ended before this one began, within EARLIER_WINDOW."""
    before = [
        other
        for other in visits
        if other.unknown
        and other.visit_id != visit.visit_id
        and visit.first_ts - EARLIER_WINDOW <= other.last_ts < visit.first_ts
    ]
    return sorted(before, key=lambda other: other.first_ts)[:EARLIER_LIMIT]


def floors_with_visits(prepared: Sequence[PreparedScenario], settings: HsiSettings) -> list[PreparedScenario]:
    """Every prepared scenario with its floor raised by its visit (same order as given); a batch without a person or
    vehicle, or without a stored context, keeps its own floor."""
    rules = VisitRules.from_settings(settings)
    visits_by_site: dict[str, dict[str, Visit]] = {}
    raised: dict[int, PreparedScenario] = {}
    in_time_order = sorted(
        range(len(prepared)),
        key=lambda i: (_started(prepared[i]), prepared[i].scenario.scenario_id),
    )
    for index in in_time_order:
        item = prepared[index]
        if item.context is None:
            raised[index] = item
            continue
        started = time.perf_counter()
        sighting = sighting_for(item.context, item.profile, settings)
        if sighting is None:
            raised[index] = item
            continue
        visits = visits_by_site.setdefault(site_of(item), {})
        visit, _ = link(sighting, list(visits.values()), rules)
        level = visit_level_for(visit, settings, _earlier(list(visits.values()), visit))
        if level.score > visit.score:
            visit = replace(visit, score=level.score, level=level.level, reasons=level.reasons)
        visits[visit.visit_id] = visit
        floor = floor_with_visit(item.floor, visit)
        spent = (time.perf_counter() - started) * 1000
        raised[index] = replace(item, floor=floor, floor_ms=item.floor_ms + spent)
    return [raised[i] for i in range(len(prepared))]
