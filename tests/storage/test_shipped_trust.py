"""The trust shipped for the bundled model (storage/shipped_trust.py): read from the package's data file, matched by
fingerprint like a stored record, and always behind the household's own measurement (storage/trust.py)."""

from __future__ import annotations

import json

import pytest

from hsi_dagster.core.evaluation.trust_sweep import TrustPoint, TrustSample, recommended_trust, trust_sweep
from hsi_dagster.core.verdict.trust import AUTO, ModelFingerprint, TrustError, resolve_trust
from hsi_dagster.llm.model_files import bundled_smollm2_path
from hsi_dagster.llm.options import short_model_name
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.shipped_trust import (
    ShippedTrustError,
    read_shipped_trust,
    shipped_trust,
    shipped_trust_record,
)
from hsi_dagster.storage.trust import save_trust, trust_record_for

ROW = {
    "fingerprint": "tiny|100|plain|full",
    "model": "tiny",
    "model_size": 100,
    "schema": "plain",
    "quality_level": "full",
    "trust": 0,
    "command": "hsi eval --split holdout",
    "measured_on": "2026-01-01",
}
TINY = ModelFingerprint("tiny", 100, "plain", "full")


def test_the_package_ships_a_measured_trust_for_the_bundled_model_as_a_fresh_install_runs_it():
    """What a fresh install's `auto` finds for SmolLM2 (the plain schema at full quality, the defaults), with the
    command behind it; and SmolLM2 earned nothing: it answers "8" to almost everything."""
    bundled = short_model_name(str(bundled_smollm2_path()))
    rows = [row for row in shipped_trust() if row["model"] == bundled]
    assert ("plain", "full") in {(row["schema"], row["quality_level"]) for row in rows}
    assert all(row["trust"] == 0 for row in rows)
    for row in rows:
        assert row["fingerprint"] == f"{bundled}|{row['model_size']}|{row['schema']}|full"
        assert row["command"].startswith("hsi eval --split holdout") and len(row["sweep"]) == 4
        # the shipped trust is the sweep's own recommendation (the highest trust earned within the false-alarm goal)
        points = [TrustPoint(**point) for point in row["sweep"]]
        assert row["trust"] == recommended_trust(points, row["false_alarm_goal"])


def test_a_shipped_record_matches_by_fingerprint_and_another_size_is_refused_by_name():
    record = shipped_trust_record(TINY, (ROW,))
    assert record is not None and (record.trust, record.fingerprint) == (0, TINY.key)
    trust = resolve_trust(AUTO, TINY, record)
    assert trust.source == "measured" and "shipped with hsi: `hsi eval --split holdout`" in trust.reason
    bigger = ModelFingerprint("tiny", 101, "plain", "full")
    with pytest.raises(TrustError, match="tiny\\|100\\|plain\\|full.*tiny\\|101\\|plain\\|full"):
        resolve_trust(AUTO, bigger, shipped_trust_record(bigger, (ROW,)))
    assert shipped_trust_record(ModelFingerprint("tiny", 100, "rubric", "full"), (ROW,)) is None


def test_the_households_own_measurement_comes_before_the_shipped_one(tmp_path):
    bundled = next(row for row in shipped_trust() if row["schema"] == "plain")
    fingerprint = ModelFingerprint(bundled["model"], bundled["model_size"], "plain", "full")
    with connect(str(tmp_path / "hsi.duckdb")) as conn:
        shipped = trust_record_for(conn, fingerprint)
        assert shipped is not None and shipped.origin.startswith("shipped with hsi")
        points = trust_sweep([TrustSample("s1", "low", 5, 0)])
        save_trust(conn, fingerprint, 3, points, goal=0.03, split="holdout", configuration="own")
        own = trust_record_for(conn, fingerprint)
    assert own is not None and (own.trust, own.origin, own.configuration) == (3, "", "own")


def test_a_malformed_shipped_file_names_the_file_and_the_record(tmp_path):
    path = tmp_path / "measured_trust.json"
    assert read_shipped_trust(path) == ()  # absent: nothing shipped
    path.write_text(json.dumps({"records": [ROW, {"fingerprint": "x"}]}), encoding="utf-8")
    with pytest.raises(ShippedTrustError, match="measured_trust.json: record 2 has no model, model_size"):
        read_shipped_trust(path)
