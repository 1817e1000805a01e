"""Trust the project measured for the model it bundles, shipped as data (`hsi_dagster/data/measured_trust.json`).

A fresh install has no `model_trust` row, so `auto` would give the bundled SmolLM2-135M the stated default (2) and
its noisy scores would raise harmless batches to alerts. The project measures that model the way a household would
(`hsi eval --split holdout`, both schemas) and ships the rows `bench/ship_trust.py` exported from that run. A row of
the household's own database always wins (storage/trust.py reads it first): its own measurement is newer and of its
own server. A shipped row is matched by fingerprint like a stored one, so another size of the model is refused.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from hsi_dagster.core.verdict.trust import ModelFingerprint, TrustRecord

SHIPPED_TRUST_PATH = Path(__file__).resolve().parents[1] / "data" / "measured_trust.json"
SHIPPED_FIELDS = ("fingerprint", "model", "model_size", "schema", "quality_level", "trust", "command", "measured_on")


class ShippedTrustError(ValueError):
    """The shipped file is malformed (a packaging error: the message names the file and the row)."""


def read_shipped_trust(path: Path = SHIPPED_TRUST_PATH) -> tuple[dict[str, Any], ...]:
    """The shipped rows; none when the file is absent."""
    if not path.exists():
        return ()
    rows = json.loads(path.read_text(encoding="utf-8")).get("records", [])
    for number, row in enumerate(rows, start=1):
        missing = [field for field in SHIPPED_FIELDS if field not in row]
        if missing:
            raise ShippedTrustError(f"{path}: record {number} has no {', '.join(missing)}")
    return tuple(rows)


@functools.cache
def shipped_trust() -> tuple[dict[str, Any], ...]:
    """The package's shipped rows, read once per process."""
    return read_shipped_trust()


def shipped_origin(row: dict[str, Any]) -> str:
    return f"shipped with hsi: `{row['command']}` on the bundled model, {row['measured_on']}"


def shipped_trust_record(
    fingerprint: ModelFingerprint, rows: tuple[dict[str, Any], ...] | None = None
) -> TrustRecord | None:
    """The shipped row of exactly this fingerprint; else one for the same model name, schema and quality level
    (another size: the caller refuses it by name); None when the project measured nothing for it."""
    rows = shipped_trust() if rows is None else rows
    same_model = [
        row
        for row in rows
        if (row["model"], row["schema"], row["quality_level"])
        == (fingerprint.model, fingerprint.schema, fingerprint.quality_level)
    ]
    if not same_model:
        return None
    row = next((row for row in same_model if row["fingerprint"] == fingerprint.key), same_model[0])
    return TrustRecord(row["fingerprint"], int(row["trust"]), row.get("configuration", ""), shipped_origin(row))
