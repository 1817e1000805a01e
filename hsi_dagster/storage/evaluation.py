"""Evaluation tables: per-scenario results and per-configuration figures (storage/schema.py, "evaluation tables").

- `evaluation_results`: one row per (configuration, scenario_id), replaced when the scenario is run again.
- `evaluation_figures`: one row per configuration, replaced by each run; `confusion` is JSON.
- `evaluation_agreement`: Cohen's kappa per pair of configurations (configuration_a < configuration_b).
- `evaluation_configurations`: what a configuration name stands for (endpoint, model, quality level, prompt hash).
A run that covers fewer scenarios than an earlier one drops the earlier rows it did not cover (`finish_run`), so
the stored results, figures and report always describe the same run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import duckdb

from hsi_dagster.core.evaluation.metrics import ConfigurationFigures, ScenarioResult

RESULT_COLUMNS: tuple[str, ...] = tuple(ScenarioResult.__dataclass_fields__)
FIGURE_COLUMNS: tuple[str, ...] = tuple(ConfigurationFigures.__dataclass_fields__)


def _now() -> datetime:
    return datetime.now(UTC)


def save_configuration(
    conn: duckdb.DuckDBPyConnection,
    configuration: str,
    *,
    endpoint: str | None,
    model: str | None,
    quality_level: str,
    prompt_sha256: str | None,
    description: str = "",
) -> None:
    conn.execute(
        "INSERT OR REPLACE INTO evaluation_configurations"
        " (configuration, endpoint, model, quality_level, prompt_sha256, description, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        [configuration, endpoint, model, quality_level, prompt_sha256, description, _now()],
    )


def save_result(conn: duckdb.DuckDBPyConnection, result: ScenarioResult) -> None:
    """One scenario's row, replacing an earlier run of the same (configuration, scenario)."""
    row = result.as_row()
    columns = [*RESULT_COLUMNS, "evaluated_at"]
    values = [row[name] for name in RESULT_COLUMNS] + [_now()]
    conn.execute(
        f"INSERT OR REPLACE INTO evaluation_results ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
        values,
    )


def finish_run(
    conn: duckdb.DuckDBPyConnection,
    figures: ConfigurationFigures,
    scenario_ids: Sequence[str],
    agreement: Iterable[tuple[str, float | None, int]] = (),
) -> None:
    """In one transaction: drop results this run did not cover, replace the figures and the pairwise kappas."""
    conn.execute("BEGIN TRANSACTION")
    try:
        conn.execute(
            "DELETE FROM evaluation_results WHERE configuration = ? AND NOT list_contains(?, scenario_id)",
            [figures.configuration, list(scenario_ids)],
        )
        row = figures.as_row()
        row["confusion"] = json.dumps(row["confusion"])
        columns = [*FIGURE_COLUMNS, "evaluated_at"]
        conn.execute(
            f"INSERT OR REPLACE INTO evaluation_figures ({', '.join(columns)})"
            f" VALUES ({', '.join('?' * len(columns))})",
            [row[name] for name in FIGURE_COLUMNS] + [_now()],
        )
        for other, kappa, count in agreement:
            a, b = sorted((figures.configuration, other))
            conn.execute(
                "INSERT OR REPLACE INTO evaluation_agreement"
                " (configuration_a, configuration_b, kappa, scenarios, evaluated_at) VALUES (?, ?, ?, ?, ?)",
                [a, b, kappa, count, _now()],
            )
        conn.execute("COMMIT")
    except Exception:
        conn.execute("ROLLBACK")
        raise


def _result_from_row(row: dict[str, Any]) -> ScenarioResult:
    values = {name: row[name] for name in RESULT_COLUMNS}
    values["sections_removed"] = tuple(values["sections_removed"] or ())
    values["floor_reasons"] = tuple(values["floor_reasons"] or ())
    return ScenarioResult(**values)


def load_results(conn: duckdb.DuckDBPyConnection, configuration: str | None = None) -> list[ScenarioResult]:
    """Stored results, ordered by configuration and scenario (all configurations when `configuration` is None)."""
    where = "WHERE configuration = ?" if configuration is not None else ""
    cursor = conn.execute(
        f"SELECT {', '.join(RESULT_COLUMNS)} FROM evaluation_results {where} ORDER BY configuration, scenario_id",
        [configuration] if configuration is not None else [],
    )
    names = [d[0] for d in cursor.description]
    return [_result_from_row(dict(zip(names, values, strict=True))) for values in cursor.fetchall()]


def stored_configurations(conn: duckdb.DuckDBPyConnection) -> list[str]:
    """Configurations with figures, in name order."""
    return [name for (name,) in conn.execute("SELECT configuration FROM evaluation_figures ORDER BY 1").fetchall()]


def load_figures(
    conn: duckdb.DuckDBPyConnection, configurations: Sequence[str] | None = None
) -> list[ConfigurationFigures]:
    where = "WHERE list_contains(?, configuration)" if configurations is not None else ""
    cursor = conn.execute(
        f"SELECT {', '.join(FIGURE_COLUMNS)} FROM evaluation_figures {where} ORDER BY configuration",
        [list(configurations)] if configurations is not None else [],
    )
    names = [d[0] for d in cursor.description]
    figures = []
    for values in cursor.fetchall():
        row = dict(zip(names, values, strict=True))
        row["confusion"] = json.loads(row["confusion"]) if isinstance(row["confusion"], str) else row["confusion"]
        row["low_scenarios"] = row["low_scenarios"] or 0
        figures.append(ConfigurationFigures(**row))
    return figures


def load_agreement(
    conn: duckdb.DuckDBPyConnection, configurations: Sequence[str] | None = None
) -> list[tuple[str, str, float | None, int]]:
    """(configuration_a, configuration_b, kappa, scenarios) for the pairs within `configurations` (all if None)."""
    rows = conn.execute(
        "SELECT configuration_a, configuration_b, kappa, scenarios FROM evaluation_agreement ORDER BY 1, 2"
    ).fetchall()
    chosen = set(configurations) if configurations is not None else None
    return [(a, b, kappa, n) for a, b, kappa, n in rows if chosen is None or (a in chosen and b in chosen)]


def load_configuration_details(conn: duckdb.DuckDBPyConnection) -> dict[str, dict[str, Any]]:
    cursor = conn.execute(
        "SELECT configuration, endpoint, model, quality_level, prompt_sha256, description"
        " FROM evaluation_configurations"
    )
    names = [d[0] for d in cursor.description]
    return {values[0]: dict(zip(names, values, strict=True)) for values in cursor.fetchall()}
