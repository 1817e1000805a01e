"""`hsi plan` through the `hsi` argument tree: exit 0 when the model fits, 1 when it does not, 2 on a bad model file;
the printed report carries the per-token KV cache and the per-slot recurrent state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hsi_dagster.cli.main import main
from tests.support.gguf_fixtures import write_nemotron_gguf


@pytest.fixture(scope="module")
def nemotron_gguf(tmp_path_factory) -> Path:
    return write_nemotron_gguf(tmp_path_factory.mktemp("gguf") / "nemotron-fixture.gguf")


@pytest.fixture(autouse=True)
def no_env_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HSI_ENV_FILE", str(tmp_path / "absent.env"))


def hsi_plan(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = main(["plan", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_exit_codes_and_report(tmp_path, capsys, nemotron_gguf):
    code, out, _ = hsi_plan(capsys, "--model", str(nemotron_gguf), "--gpu-mem-gib", "24")
    assert code == 0 and "fits" in out and "6.00 KiB/token" in out and "47.6 MiB/slot" in out
    code, out, _ = hsi_plan(capsys, "--gpu-mem-gib", "0.5")  # SmolLM2 with the 400 MiB CUDA overhead
    assert code == 1 and "DOES NOT FIT" in out and "what to change:" in out
    code, _, err = hsi_plan(capsys, "--model", str(tmp_path / "missing.gguf"))
    assert code == 2 and "MODEL_PATH: cannot read the GGUF header" in err


def test_overrides_and_json_output(capsys, nemotron_gguf):
    code, out, _ = hsi_plan(capsys, "--model", str(nemotron_gguf), "--ctx-size", "65536", "--parallel", "4", "--json")
    plan = json.loads(out)
    assert code == 0 and plan["fits"] is None  # no GPU size given: no verdict
    assert (plan["inputs"]["ctx_size"], plan["inputs"]["parallel"], plan["slot_cells"]) == (65536, 4, 16384)
    assert plan["kv_bytes"] == 65536 * 6 * 1024


def test_bad_values_exit_2_naming_the_problem(capsys, nemotron_gguf):
    code, _, err = hsi_plan(capsys, "--model", str(nemotron_gguf), "--gpu-mem-gib", "-1")
    assert code == 2 and "--gpu-mem-gib must be positive" in err
    code, _, err = hsi_plan(capsys, "--model", str(nemotron_gguf), "--cache-type-k", "q3_k")
    assert code == 2 and "CACHE_TYPE_K" in err


def test_an_override_tensor_that_does_not_parse_exits_2_naming_it(capsys, nemotron_gguf, monkeypatch):
    monkeypatch.setenv("OVERRIDE_TENSOR", "exps")
    code, _, err = hsi_plan(capsys, "--model", str(nemotron_gguf))
    assert code == 2 and "OVERRIDE_TENSOR" in err and "<tensor name regex>=<buffer type>" in err
