"""The evaluation report: the stored figures, results and agreement of chosen configurations as markdown with charts.

Reads what the engine (evaluation/engine.py) stored; the `evaluation` asset, `hsi eval` and the bench call it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hsi_dagster.core.evaluation.report import render_report
from hsi_dagster.evaluation.charts import comparison_png, confusion_png, data_uri
from hsi_dagster.resources import HsiDuckDBResource
from hsi_dagster.storage.evaluation import load_agreement, load_configuration_details, load_figures, load_results


def report_for(
    duckdb: HsiDuckDBResource,
    configurations: Sequence[str],
    scenario_source: str,
    *,
    image_ref: Callable[[str, bytes], str] = lambda key, png: data_uri(png),
) -> str:
    """The markdown report for stored configurations; `image_ref(key, png)` places each chart (default: embedded as
    a base64 data URI) and returns its reference."""
    with duckdb.get_connection(read_only=True) as conn:
        figures = load_figures(conn, configurations)
        results = [r for name in configurations for r in load_results(conn, name)]
        agreement = load_agreement(conn, configurations)
        details = load_configuration_details(conn)
    charts = {"comparison": comparison_png(figures)}
    for item in figures:
        charts[f"confusion:{item.configuration}"] = confusion_png(item)
    images = {key: image_ref(key, png) for key, png in charts.items()}
    return render_report(figures, results, agreement, details, scenario_source=scenario_source, images=images)
