"""Model trust in an evaluation pass (evaluation/trust.py) without a server: the sweep of the with-floor results is
stored for the model's fingerprint in a real DuckDB file, and production's lookup finds it. The real-server path
(the fingerprint the server reports, `hsi eval` printing the sweep) is in tests/cli/test_eval.py."""

from __future__ import annotations

from hsi_dagster.core.verdict.trust import ModelFingerprint
from hsi_dagster.evaluation.trust import measure_trust


def test_the_trust_sweep_of_a_pass_is_stored_for_the_models_fingerprint(tmp_path) -> None:
    """measure_trust on with-floor results (holdout only) writes the recommended trust to a real DuckDB file, and
    production's lookup finds it for that fingerprint; a tune-only run stores nothing and says why."""
    from hsi_dagster.core.evaluation.metrics import ScenarioResult
    from hsi_dagster.core.verdict.trust import AUTO, Trust, resolve_trust
    from hsi_dagster.resources import HsiDuckDBResource
    from hsi_dagster.storage.db import connect
    from hsi_dagster.storage.trust import measured_trust, trust_record_for

    def result(n: int, expected: str, model: int, floor: int, split: str = "holdout") -> ScenarioResult:
        return ScenarioResult(
            "q.full.with-floor",
            f"s{n}",
            "c",
            expected,
            0,
            100,
            False,
            "ok",
            model_score=model,
            floor_score=floor,
            split=split,
        )

    results = [result(n, "low", 5, 0) for n in range(20)] + [result(90, "critical", 92, 0), result(91, "low", 93, 0)]
    results += [result(92, "medium", 50, 0), result(93, "medium", 50, 0)]  # two mediums only the model saw
    fingerprint = ModelFingerprint("qwen", 1234, "plain", "full")
    duckdb = HsiDuckDBResource(database=str(tmp_path / "hsi.duckdb"))
    applied = Trust(2, "default", "no measured trust")
    measurement = measure_trust(results, fingerprint, applied, duckdb, "q.full")
    # the cat alerts from trust 2: 1 of 21 harmless; trust 1 earns its keep: the two mediums are stored right
    assert measurement.recommended == 1 and measurement.stored
    assert [p.trust for p in measurement.holdout] == [0, 1, 2, 3] and measurement.holdout[3].recall == 1.0
    with connect(duckdb.database, read_only=True) as conn:
        record = trust_record_for(conn, fingerprint)
        (row,) = measured_trust(conn)
    assert record is not None and resolve_trust(AUTO, fingerprint, record).value == 1
    assert row["split"] == "holdout" and len(row["sweep"]) == 4 and row["sweep"][2]["false_alarm_rate"] > 0.03
    tune_only = [result(n, "low", 5, 0, "tune") for n in range(5)]
    other = ModelFingerprint("other", 1, "plain", "full")
    nothing = measure_trust(tune_only, other, applied, duckdb, "o.full")
    assert not nothing.stored and nothing.recommended is None and "holdout" in nothing.note
    assert not measure_trust(results, None, applied, duckdb, "x").stored
