"""`hsi llm sweep`: on REAL embedded llama.cpp servers (one scenario per candidate), the baseline and one candidate
measured side by side, and the bad input of issue 39 (an unknown setting, a refused value, a server that does not
start) reported as failed candidates while the sweep goes on and leaves nothing running; bad arguments exit 2;
the recommendation and the table from figures alone."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hsi_dagster.cli.main import main
from hsi_dagster.cli.sweep_report import CandidateRun, markdown, recommend, with_ratios

llm = pytest.mark.llm

ENV = "CTX_SIZE=8192\nPARALLEL=1\nTHREADS=1\nNEMOTRON_MAX_OUTPUT_TOKENS=384\n"


def _embedded_children() -> list[str]:
    """Embedded servers this process started that are still there (zombies included)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == os.getpid() and "hsi_dagster.llm.embedded" in cmdline:
            found.append(f"{stat.parent.name} ({fields[0]}): {cmdline}")
    return found


@llm
def test_sweep_measures_two_candidates_and_reports_the_bad_ones(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    env = tmp_path / "hsi.env"
    env.write_text(ENV)
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a model at all\n" * 64)
    out = tmp_path / "sweep"
    code = main(
        ["llm", "sweep", "--env-file", str(env), "--scenarios", "1", "--out", str(out)]
        + ["--try", "PARALLEL=1,2", "--try", "BOGUS=1", "--try", "CACHE_TYPE_K=q3_x"]
        + ["--try", f"MODEL_PATH={broken}", "--startup-timeout", "300"]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    document = json.loads((out / "sweep.json").read_text())
    runs = {run["name"]: run for run in document["candidates"]}
    assert list(runs) == ["baseline", "PARALLEL=2", "BOGUS=1", "CACHE_TYPE_K=q3_x", f"MODEL_PATH={broken}"]

    base, two = runs["baseline"], runs["PARALLEL=2"]
    for run, slots in ((base, 1), (two, 2)):
        assert run["status"] == "ok", run["reason"]
        server, figures = run["server"], run["figures"]
        assert server["total_slots"] == slots and server["slot_context"] == 8192 // slots  # as /props says
        assert server["model_alias"] == "SmolLM2-135M-Instruct.Q4_1" and server["build_info"]
        assert len(server["model_sha256"]) == 64 and server["model_bytes"] > 10**7
        assert f"--parallel {slots}" in " ".join(server["argv"])  # the flags production would pass
        assert server["peak_rss_bytes"] > 50 * 2**20
        assert figures["scenarios"] == 1 and figures["verdicts"] == 1 and figures["completions"] >= 1
        assert figures["verdicts_per_minute"] > 0 and figures["latency_p95_s"] >= figures["latency_p50_s"] > 0
        assert figures["prompt_tokens_per_s"] > 0 and figures["generation_tokens_per_s"] > 0
        assert figures["prompt_tokens"] > 1000 and 0 <= figures["cached_tokens"] < figures["prompt_tokens"]
        assert 0 <= figures["schema_valid_rate"] <= 1
    assert base["ratios"] == {key: 1.0 for key in base["ratios"]} and len(base["ratios"]) == 6
    assert two["ratios"]["verdicts_per_minute"] == pytest.approx(
        two["figures"]["verdicts_per_minute"] / base["figures"]["verdicts_per_minute"]
    )

    assert runs["BOGUS=1"]["status"] == "failed" and "unknown setting 'BOGUS'" in runs["BOGUS=1"]["reason"]
    assert "CACHE_TYPE_K='q3_x' is invalid" in runs["CACHE_TYPE_K=q3_x"]["reason"]
    not_started = runs[f"MODEL_PATH={broken}"]
    assert not_started["status"] == "failed" and not_started["reason"].startswith("the server exited with code")
    assert "its last log lines:" in not_started["reason"] and "failed to start" in not_started["reason"]

    assert _embedded_children() == []  # every server stopped, the one that failed too
    report = (out / "sweep.md").read_text()
    assert document["recommendation"] in report and document["recommendation"] in printed
    table = [line for line in report.splitlines() if line.startswith("| ")]
    assert table[1].startswith("| baseline | ok |") and table[2].startswith("| PARALLEL=2 | ok |")
    assert "(x" in table[2] and "| BOGUS=1 | failed |" in table[3]
    assert (out / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "llama-server-baseline.log").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--try", "PARALLEL"], "give NAME=value"),
        (["--try", "PARALLEL=2", "--endpoint", "http://127.0.0.1:9"], "leave out --try and --candidates"),
        (["--scenarios", "0"], "--scenarios 0: give at least 1"),
    ],
)
def test_bad_arguments_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture, argv: list[str], message: str) -> None:
    assert main(["llm", "sweep", "--out", str(tmp_path), *argv]) == 2
    assert message in capsys.readouterr().err


def test_an_unreachable_endpoint_is_a_failed_candidate(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing listens at the URL: the candidate fails naming it, no candidate ran: exit 1, the report written."""
    code = main(["llm", "sweep", "--endpoint", "http://127.0.0.1:9", "--out", str(tmp_path), "--startup-timeout", "1"])
    assert code == 1
    document = json.loads((tmp_path / "sweep.json").read_text())
    assert document["candidates"][0]["status"] == "failed"
    assert "no llama-server at http://127.0.0.1:9" in document["candidates"][0]["reason"]
    assert document["recommendation"].startswith("No recommendation: the baseline did not run")


def _run(name: str, **figures: float) -> CandidateRun:
    base = {"scenarios": 12, "verdicts": 12, "schema_valid_rate": 1.0, "level_accuracy": 0.75, "statuses": {}}
    return CandidateRun(name, {}, "ok", figures={**base, **figures})


def test_recommendation_needs_speed_or_memory_at_equal_quality() -> None:
    fast = {"verdicts_per_minute": 10.0, "latency_p95_s": 8.0, "peak_rss_mib": 1000.0}
    runs = [_run("baseline", **fast), _run("PARALLEL=2", **{**fast, "verdicts_per_minute": 13.0})]
    with_ratios(runs)
    assert recommend(runs).startswith("Switch to PARALLEL=2: verdicts/min x1.30, p95 latency x1.00, peak memory +0%")
    worse = [runs[0], _run("PARALLEL=2", **{**fast, "verdicts_per_minute": 13.0, "level_accuracy": 0.5})]
    with_ratios(worse)
    assert recommend(worse).startswith("Keep the baseline")
    lighter = [runs[0], _run("CACHE_TYPE_K=q8_0", **{**fast, "peak_rss_mib": 800.0})]
    with_ratios(lighter)
    assert recommend(lighter).startswith("Switch to CACHE_TYPE_K=q8_0 to save memory: peak memory -20%")
    failed = [runs[0], CandidateRun("BOGUS=1", {}, "failed", reason="unknown setting")]
    with_ratios(failed)
    assert recommend(failed).endswith("(1 candidate(s) failed: BOGUS=1).")
    assert "| BOGUS=1 | failed |" in markdown(failed, recommend(failed), "t")
