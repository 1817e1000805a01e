"""Labeled scenarios whose right answer depends on the camera's history (issue 25): owned by the history work.

`scenarios.generate_scenarios` appends `HISTORY_CATEGORIES` after the other categories (so adding one renumbers
nothing before it). A category's scene carries `history`: the plain inputs in core/history.py's JSON shape, from
which the evaluation computes `HistoryFacts` with the function production uses.
"""

from __future__ import annotations

from hsi_dagster.synthetic.scenario_kit import Category

HISTORY_CATEGORIES: tuple[Category, ...] = ()
