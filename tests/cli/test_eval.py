"""`hsi eval`: bad arguments exit 2 naming what is wrong; on the real embedded server (ONE scenario, one
configuration) it writes report.md with its charts and prints where."""

from __future__ import annotations

from pathlib import Path

import pytest

from hsi_dagster.cli.main import main
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
    assert "s001 delivery_day" in printed and f"report: {out / 'report.md'}" in printed
    report = (out / "report.md").read_text(encoding="utf-8")
    assert f"| {key} |" in report and "## Adversarial text" in report
    assert "![comparison](comparison.png)" in report
    assert (out / "comparison.png").read_bytes().startswith(b"\x89PNG")
    assert (out / f"confusion-{key}.png").read_bytes().startswith(b"\x89PNG")
