"""`hsi eval`: bad arguments exit 2 naming what is wrong; the floor alone runs with no server at all; on the real
embedded server (ONE scenario, one pass = three configurations) it writes report.md with its charts."""

from __future__ import annotations

from pathlib import Path

import pytest

from hsi_dagster.cli.main import main
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.evaluation import load_results
from hsi_dagster.synthetic.frigate_eval import FRIGATE_EVAL_DIR, load_labels
from tests.support.llm_fixtures import RunningLlama


def test_unknown_scenario_id_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code = main(["eval", "--db", str(tmp_path / "e.duckdb"), "--scenario", "s999", "--out", str(tmp_path)])
    assert code == 2
    assert "unknown scenario id(s): s999" in capsys.readouterr().err


def test_labels_must_match_the_endpoints(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    argv = ["eval", "--db", str(tmp_path / "e.duckdb"), "--endpoint", "http://127.0.0.1:9", "--label", "a"]
    assert main([*argv, "--label", "b"]) == 2
    assert "2 label(s) for 1 endpoint(s)" in capsys.readouterr().err


def test_unreachable_endpoint_names_the_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLM_STARTUP_TIMEOUT_SECONDS", "1")
    code = main(
        ["eval", "--db", str(tmp_path / "e.duckdb"), "--endpoint", "http://127.0.0.1:9", "--limit", "1"]
        + ["--out", str(tmp_path / "report")]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("hsi eval: configuration 127.0.0.1_9.full: ") and "127.0.0.1:9" in err
    assert not (tmp_path / "report" / "report.md").exists()


def test_floor_only_needs_no_server_and_reports_each_split(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLAMA_SERVER_URL", "http://127.0.0.1:9")  # nothing listens: the floor must not ask
    db, out = tmp_path / "e.duckdb", tmp_path / "report"
    assert main(["eval", "--db", str(db), "--floor-only", "--out", str(out)]) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "floor.full: no server" in printed and "floor.full (evidence floor): level accuracy" in printed
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "| holdout | floor.full |" in report and "| tune | floor.full |" in report
    with connect(str(db), read_only=True) as conn:
        rows = load_results(conn, "floor.full")
    assert {r.split for r in rows} == {"tune", "holdout"} and all(r.llm_calls == 0 for r in rows)
    weapon = next(r for r in rows if r.category == "knife_at_door")
    assert weapon.risk_level == "critical" and any("weapon" in reason for reason in weapon.floor_reasons)
    assert main(["eval", "--db", str(db), "--floor-only", "--split", "holdout", "--out", str(out)]) == 0
    with connect(str(db), read_only=True) as conn:
        assert {r.split for r in load_results(conn, "floor.full")} == {"holdout"}  # the run replaced the rows
    assert main(["eval", "--db", str(db), "--floor-only", "--schema", "rubric"]) == 2
    assert "--floor-only runs no model" in capsys.readouterr().err


def test_floor_only_on_the_frigate_set_reports_scenes_and_keeps_the_sets_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    db, out = tmp_path / "e.duckdb", tmp_path / "report"
    assert main(["eval", "--db", str(db), "--floor-only", "--scenario", "s001", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["eval", "--db", str(db), "--set", "frigate", "--floor-only", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    labels = load_labels()
    holdout = sum(label.split == "holdout" for label in labels)
    assert f"{len(labels)} labeled scenes from" in printed and "0 batches no scene covers" in printed
    assert "frigate.floor.full: no server" in printed and "  f038 holdout knife_night" in printed
    assert f"    holdout: {holdout} scenarios, level accuracy" in printed
    assert f"    tune: {len(labels) - holdout} scenarios" in printed
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "| holdout | frigate.floor.full |" in report and "| floor.full |" not in report  # one set per report
    assert f"{len(labels)} scenes, judged by their highest batch; " in report
    assert " batches in scenes; 0 batches no scene covers)" in report
    with connect(str(db), read_only=True) as conn:
        assert [r.scenario_id for r in load_results(conn, "floor.full")] == ["s001"]  # the project's rows kept
        assert len(load_results(conn, "frigate.floor.full")) == len(labels)
    assert main(["eval", "--db", str(db), "--set", "frigate", "--floor-only", "--limit", "3"]) == 2
    assert "leave out --scenarios and --limit" in capsys.readouterr().err
    assert main(["eval", "--db", str(db), "--floor-only", "--camera-profiles", "x.yaml"]) == 2
    assert "--camera-profiles goes with --set frigate" in capsys.readouterr().err


def test_floor_only_on_the_visit_set_prints_rows_with_and_without_visits(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    db, out = tmp_path / "e.duckdb", tmp_path / "report"
    assert main(["eval", "--db", str(db), "--set", "visits", "--floor-only", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "10 situations (27 batches) from" in printed
    assert "visits.floor.full: no server" in printed and "visits.floor.full.visits: no server" in printed
    assert (
        "threat:casing_visit" in printed
        and "batches low -> medium -> high (household medium -> medium -> high)" in printed
    )
    assert "  without visits: recall(high+critical), threats: 2 of 4 (50%)" in printed
    assert "  with visits: recall(high+critical), threats: 4 of 4 (100%)" in printed
    assert (
        "  with visits: false alarms (high+critical), harmless: 0 of 6 (0%); raised above low: 0 of 6 (0%)" in printed
    )
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "| holdout | visits.floor.full.visits |" in report and "| floor.full |" not in report
    with connect(str(db), read_only=True) as conn:
        assert len(load_results(conn, "visits.floor.full")) == len(load_results(conn, "visits.floor.full.visits")) == 10
    assert main(["eval", "--db", str(db), "--set", "visits", "--floor-only", "--limit", "2"]) == 2
    assert "leave out --scenarios and --limit" in capsys.readouterr().err
    assert main(["eval", "--db", str(db), "--set", "visits", "--floor-only", "--split", "tune"]) == 2
    assert "every situation is on the holdout split" in capsys.readouterr().err


def test_frigate_set_with_the_profiles_hsi_frigate_proposes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    profiles, db = tmp_path / "proposed.yaml", tmp_path / "e.duckdb"
    config = str(FRIGATE_EVAL_DIR / "frigate.yaml")
    assert main(["frigate", "profiles", "--frigate-config", config, "--out", str(profiles)]) == 0
    argv = ["eval", "--db", str(db), "--set", "frigate", "--floor-only", "--split", "holdout", "--out", str(tmp_path)]
    assert main([*argv, "--camera-profiles", str(profiles)]) == 0
    printed = capsys.readouterr().out
    assert "frigate.profiles.floor.full: no server" in printed
    # a stranger at the door at night: raised with the proposed profiles (entry zone `porch`)
    assert "  f025 holdout stranger_door_overlap_night  expected high     got high" in printed
    # hsi's own write-back ("risk high", no score) back on Frigate's next update is no identity: still a stranger
    assert "  f047 holdout writeback_stranger_night     expected high     got high" in printed
    with connect(str(db), read_only=True) as conn:
        holdout = sum(label.split == "holdout" for label in load_labels())
        assert len(load_results(conn, "frigate.profiles.floor.full")) == holdout
    assert main([*argv, "--camera-profiles", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.llm
def test_eval_writes_report_and_charts(
    llama_server: RunningLlama, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NEMOTRON_MAX_OUTPUT_TOKENS", "768")
    monkeypatch.setenv("LLM_READ_TIMEOUT_SECONDS", "900")
    monkeypatch.setenv("CTX_SIZE", "8192")
    out = tmp_path / "report"
    code = main(
        ["eval", "--db", str(tmp_path / "e.duckdb"), "--endpoint", llama_server.url, "--quality-level", "minimal"]
        + ["--scenario", "s001", "--out", str(out)]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    key = llama_server.url.removeprefix("http://").replace(":", "_") + ".minimal"
    assert "s001 " in printed and "delivery_day" in printed and f"report: {out / 'report.md'}" in printed
    report = (out / "report.md").read_text(encoding="utf-8")
    assert f"| {key} |" in report and "## Adversarial text" in report
    assert f"| {key}.with-floor |" in report and "| floor.minimal |" in report  # one model pass, three rows
    assert "![comparison](comparison.png)" in report
    assert (out / "comparison.png").read_bytes().startswith(b"\x89PNG")
    assert (out / f"confusion-{key}.png").read_bytes().startswith(b"\x89PNG")
    # s001 is a harmless holdout scenario: the pass's trust sweep is printed and its recommendation stored for the
    # fingerprint the real server reports (its model name and size, plain schema, minimal quality).
    from hsi_dagster.storage.db import connect
    from hsi_dagster.storage.trust import measured_trust

    assert "trust sweep, holdout: trust  recall(high+critical)  false alarms" in printed
    with connect(tmp_path / "e.duckdb", read_only=True) as conn:
        (record,) = measured_trust(conn)
    assert record["fingerprint"].endswith("|plain|minimal") and record["model_size"] > 0
    assert record["trust"] in (0, 1, 2, 3) and [p["trust"] for p in record["sweep"]] == [0, 1, 2, 3]
    assert (
        f"recommended trust {record['trust']}: stored: trust {record['trust']} for {record['fingerprint']}" in printed
    )


@pytest.mark.slow
@pytest.mark.llm
def test_a_model_pass_on_the_frigate_set(
    llama_server: RunningLlama, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One Frigate scene (the knife at the side gate: one batch, its review in the prompt) through the real server:
    three configurations stored per scene under `frigate.`, no trust sweep stored from this set."""
    monkeypatch.setenv("NEMOTRON_MAX_OUTPUT_TOKENS", "768")
    monkeypatch.setenv("LLM_READ_TIMEOUT_SECONDS", "900")
    monkeypatch.setenv("CTX_SIZE", "8192")
    db = tmp_path / "e.duckdb"
    code = main(
        ["eval", "--db", str(db), "--set", "frigate", "--endpoint", llama_server.url, "--quality-level", "minimal"]
        + ["--label", "smol", "--scenario", "f038", "--out", str(tmp_path / "report")]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "  f038 holdout knife_night" in printed and "got critical" in printed  # the floor's weapon rule stands
    with connect(str(db), read_only=True) as conn:
        rows = {name: load_results(conn, name) for name in ("frigate.smol.minimal", "frigate.smol.minimal.with-floor")}
        from hsi_dagster.storage.trust import measured_trust

        assert measured_trust(conn) == []
    assert [r.scenario_id for r in rows["frigate.smol.minimal"]] == ["f038"]
    (stored,) = rows["frigate.smol.minimal.with-floor"]
    assert stored.llm_calls >= 1 and stored.prompt_tokens > 0 and stored.risk_level == "critical"
    report = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    assert "| frigate.smol.minimal.with-floor |" in report and "| frigate.floor.minimal |" in report


@pytest.mark.slow
@pytest.mark.llm
@pytest.mark.timeout(1800)  # three model calls, one per batch of the situation
def test_a_model_pass_on_the_visit_set(
    llama_server: RunningLlama, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The casing visit (three batches) through the real server with visits: the model's call per batch, the stored
    verdict raised to the visit's floor on the third batch (high), one result per situation, no trust sweep stored."""
    monkeypatch.setenv("NEMOTRON_MAX_OUTPUT_TOKENS", "768")
    monkeypatch.setenv("LLM_READ_TIMEOUT_SECONDS", "900")
    monkeypatch.setenv("CTX_SIZE", "8192")
    db = tmp_path / "e.duckdb"
    code = main(
        ["eval", "--db", str(db), "--set", "visits", "--visits", "on", "--endpoint", llama_server.url]
        + ["--quality-level", "minimal", "--label", "smol", "--scenario", "casing_visit", "--out", str(tmp_path / "r")]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "1 situations (3 batches) from" in printed and "with visits: batches at the household's level:" in printed
    with connect(str(db), read_only=True) as conn:
        from hsi_dagster.storage.trust import measured_trust

        (stored,) = load_results(conn, "visits.smol.minimal.visits.with-floor")
        (floor,) = load_results(conn, "visits.floor.minimal.visits")
        assert measured_trust(conn) == []
    assert stored.scenario_id == "casing_visit" and stored.llm_calls >= 1 and stored.prompt_tokens > 0
    assert floor.risk_level == "high" and stored.risk_level in ("high", "critical")
    assert floor.floor_reasons[0].startswith("visit visit:eval:casing_visit.b1: third camera in 6 minutes")


def test_frigate_like_inputs_are_stored_apart_and_lose_what_only_enrichment_saw(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """`--inputs frigate`: the project's scenarios cut to what Frigate sends. A resident turning violent at the door
    (s084) is critical on the violence and action models; with Frigate's inputs only the recognised face is left."""
    db, out = tmp_path / "e.duckdb", tmp_path / "report"
    picked = ["--scenario", "s084", "--scenario", "s001"]
    assert main(["eval", "--db", str(db), "--floor-only", *picked, "--out", str(out)]) == 0
    assert main(["eval", "--db", str(db), "--floor-only", "--inputs", "frigate", *picked, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "floor.full.frigate-inputs (evidence floor): level accuracy" in printed
    with connect(str(db), read_only=True) as conn:
        enriched = {r.scenario_id: r.risk_level for r in load_results(conn, "floor.full")}
        frigate = {r.scenario_id: r.risk_level for r in load_results(conn, "floor.full.frigate-inputs")}
    assert enriched == {"s084": "critical", "s001": "low"} and frigate == {"s084": "low", "s001": "low"}
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "| floor.full.frigate-inputs |" in report and "| floor.full |" in report
    assert main(["eval", "--db", str(db), "--set", "frigate", "--floor-only", "--inputs", "frigate"]) == 2
    assert "--inputs goes with the project's set" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.llm
def test_a_model_pass_on_frigate_like_inputs_stores_no_trust(
    llama_server: RunningLlama, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--inputs frigate` with the real server: the pass's three configurations carry `.frigate-inputs`, and no trust
    is stored for the model (trust is measured on the project's set as written; the fingerprint has no inputs)."""
    monkeypatch.setenv("NEMOTRON_MAX_OUTPUT_TOKENS", "768")
    monkeypatch.setenv("LLM_READ_TIMEOUT_SECONDS", "900")
    monkeypatch.setenv("CTX_SIZE", "8192")
    db = tmp_path / "e.duckdb"
    code = main(
        ["eval", "--db", str(db), "--inputs", "frigate", "--endpoint", llama_server.url, "--quality-level", "minimal"]
        + ["--label", "smol", "--scenario", "s001", "--out", str(tmp_path / "report")]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    from hsi_dagster.storage.trust import measured_trust

    names = ("smol.minimal.frigate-inputs", "smol.minimal.frigate-inputs.with-floor", "floor.minimal.frigate-inputs")
    with connect(str(db), read_only=True) as conn:
        rows = {name: load_results(conn, name) for name in names}
        assert measured_trust(conn) == []
    assert all([r.scenario_id for r in found] == ["s001"] for found in rows.values()), rows
    assert rows["smol.minimal.frigate-inputs.with-floor"][0].llm_calls >= 1
