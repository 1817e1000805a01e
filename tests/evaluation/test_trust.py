"""Model trust in an evaluation pass (evaluation/trust.py) without a server: the sweep of the with-floor results is
stored for the model's fingerprint in a real DuckDB file, and production's lookup finds it. The real-server path
(the fingerprint the server reports, `hsi eval` printing the sweep) is in tests/cli/test_eval.py."""

from __future__ import annotations

from hsi_dagster.core.verdict.trust import ModelFingerprint
from hsi_dagster.evaluation.trust import measure_household_trust, measure_trust


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


def test_the_households_corrected_batches_measure_the_trust_once_there_are_enough(tmp_path) -> None:
    """measure_household_trust: below 30 corrected batches (10 harmless, 3 threats) nothing is stored and the labeled
    set's record stands, saying why; with enough, the household's measurement is stored and production reads it
    BEFORE the labeled set's record of the same fingerprint, naming where it comes from."""
    from hsi_dagster.core.evaluation.metrics import ScenarioResult
    from hsi_dagster.core.verdict.trust import AUTO, Trust, resolve_trust
    from hsi_dagster.resources import HsiDuckDBResource
    from hsi_dagster.storage.db import connect
    from hsi_dagster.storage.trust import measured_trust, save_trust, trust_record_for

    def corrected(n: int, expected: str, model: int, floor: int) -> ScenarioResult:
        return ScenarioResult(
            "household.with-floor", f"b{n}", "drive", expected, 0, 100, False, "ok", model_score=model,
            floor_score=floor, split="household",
        )  # fmt: skip

    fingerprint = ModelFingerprint("qwen", 1234, "plain", "full")
    duckdb = HsiDuckDBResource(database=str(tmp_path / "hsi.duckdb"))
    applied = Trust(0, "measured", "measured trust 0")
    with connect(duckdb.database) as conn:  # the labeled set measured trust 0 for this model
        save_trust(conn, fingerprint, 0, [], goal=0.03, split="holdout", configuration="q.full")
    # on this household the model finds the three break-ins the rules miss and never raises a harmless batch
    threats = [corrected(n, "high", 80, 0) for n in range(3)]
    few = [*threats, *(corrected(n, "low", 5, 0) for n in range(10, 22))]
    short = measure_household_trust(few, fingerprint, applied, duckdb)
    assert not short.stored and short.recommended == 3
    assert "15 corrected batches (12 harmless, 3 high or critical)" in short.note and "needs 30" in short.note
    with connect(duckdb.database, read_only=True) as conn:
        assert trust_record_for(conn, fingerprint).trust == 0  # the labeled set's stands

    enough = [*few, *(corrected(n, "low", 5, 0) for n in range(30, 45))]
    measured = measure_household_trust(enough, fingerprint, applied, duckdb)
    assert measured.stored and measured.recommended == 3 and "30 corrected batches" in measured.note
    with connect(duckdb.database, read_only=True) as conn:
        record = trust_record_for(conn, fingerprint)
        other_size = trust_record_for(conn, ModelFingerprint("qwen", 999, "plain", "full"))
        listed = [(row["split"], row["trust"]) for row in measured_trust(conn)]
    trust = resolve_trust(AUTO, fingerprint, record)
    assert (trust.value, trust.reason) == (3, "measured trust 3 (the household's 30 corrected batches)")
    assert listed == [("household", 3), ("holdout", 0)]  # what `hsi config check` reports, the household's first
    assert other_size is not None and other_size.trust == 0 and not other_size.origin  # only the exact model's

    # a household whose corrections say the model's raises are false alarms takes its trust away
    noisy = [*enough[:-1], corrected(99, "low", 90, 0)]
    assert measure_household_trust(noisy, fingerprint, applied, duckdb).recommended == 0
    with connect(duckdb.database, read_only=True) as conn:
        assert trust_record_for(conn, fingerprint).trust == 0
