"""The llama-server command line from .env / the environment: exact argv per setting, exact errors naming
the variable, and the API key never on the command line."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from hsi_dagster.llm.argv import ArgvError, LlamaArgvWarning, build_argv, main
from hsi_dagster.llm.options import LlamaServerOptions
from hsi_dagster.settings import HsiSettings, load_settings

REPO = Path(__file__).resolve().parents[2]
MODEL = "/models/m.gguf"

DEFAULT_ARGV = [
    "llama-server", "--model", MODEL, "--alias", "m", "--host", "127.0.0.1", "--port", "8091", "--n-gpu-layers", "auto",
    "--ctx-size", "32768", "--parallel", "2", "--cont-batching", "--metrics", "--slots", "--flash-attn", "on",
    "--prio", "-1", "--prio-batch", "-1",
    "--batch-size", "2048", "--cache-type-k", "f16", "--cache-type-v", "f16", "--cache-reuse", "256",
    "--cache-ram", "256",
]  # fmt: skip


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No setting leaks in from the developer's shell or a .env in the working directory."""
    for name in list(HsiSettings.model_fields) + ["LLAMA_API_KEY_FILE"]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HSI_ENV_FILE", str(tmp_path / "absent.env"))
    monkeypatch.setenv("MODEL_PATH", MODEL)
    return monkeypatch


CASES = {
    "defaults": ({}, DEFAULT_ARGV),
    "every option": (
        {
            "LLM_HOST": "0.0.0.0", "LLM_PORT": "9000", "GPU_LAYERS": "ALL", "CTX_SIZE": "65536", "PARALLEL": "4",
            "FLASH_ATTENTION": "false", "THREADS": "8", "BATCH_SIZE": "512", "CACHE_TYPE_K": "q8_0",
            "CACHE_TYPE_V": "bf16", "CACHE_REUSE": "0", "MLOCK": "true", "N_CPU_MOE": "12",
            "DRAFT_MODEL_PATH": "/models/draft.gguf",
        },
        [
            "llama-server", "--model", MODEL, "--alias", "m", "--host", "0.0.0.0", "--port", "9000",
            "--n-gpu-layers", "all",
            "--ctx-size", "65536", "--parallel", "4", "--cont-batching", "--metrics", "--slots", "--flash-attn", "off",
            "--threads", "8", "--prio", "-1", "--prio-batch", "-1",
            "--batch-size", "512", "--cache-type-k", "q8_0", "--cache-type-v", "bf16",
            "--cache-reuse", "0", "--cache-ram", "256", "--load-mode", "mmap+mlock", "--n-cpu-moe", "12",
            "--spec-type", "draft-simple", "--model-draft", "/models/draft.gguf",
        ],
    ),
    "override tensor, numeric layers, quantized cache": (
        {
            "GPU_LAYERS": "40", "OVERRIDE_TENSOR": r"blk\.(1|2)\.ffn_.*_exps=CPU", "CACHE_TYPE_K": "q4_0",
            "CACHE_TYPE_V": "q8_0",
        },
        [
            "llama-server", "--model", MODEL, "--alias", "m", "--host", "127.0.0.1", "--port", "8091",
            "--n-gpu-layers", "40",
            "--ctx-size", "32768", "--parallel", "2", "--cont-batching", "--metrics", "--slots", "--flash-attn", "on",
            "--prio", "-1", "--prio-batch", "-1",
            "--batch-size", "2048", "--cache-type-k", "q4_0", "--cache-type-v", "q8_0", "--cache-reuse", "256",
            "--cache-ram", "256", "--override-tensor", r"blk\.(1|2)\.ffn_.*_exps=CPU",
        ],
    ),
    "N_CPU_MOE=0 adds no flag": ({"N_CPU_MOE": "0"}, DEFAULT_ARGV),
    "MODEL_ALIAS names the served model": (
        {"MODEL_ALIAS": "nemotron-3-nano"}, [*DEFAULT_ARGV[:3], "--alias", "nemotron-3-nano", *DEFAULT_ARGV[5:]]
    ),
    "empty optional values are unset": (
        {"THREADS": "", "N_CPU_MOE": "", "OVERRIDE_TENSOR": "", "DRAFT_MODEL_PATH": ""}, DEFAULT_ARGV
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_environment_gives_exact_argv(case, clean_env, capsys):
    env, expected = CASES[case]
    for name, value in env.items():
        clean_env.setenv(name, value)
    assert main(["--print"]) == 0
    out, err = capsys.readouterr()
    assert shlex.split(out) == expected
    assert ("DRAFT_MODEL_PATH is set" in err) == ("DRAFT_MODEL_PATH" in env and bool(env["DRAFT_MODEL_PATH"]))


INVALID = "error: invalid configuration: "
ERRORS = {
    "quantized V without flash attention": (
        {"CACHE_TYPE_V": "q4_0", "FLASH_ATTENTION": "false"},
        INVALID + "CACHE_TYPE_V: q4_0 needs FLASH_ATTENTION=true (llama.cpp refuses a quantized V cache without it)",
    ),
    "N_CPU_MOE with OVERRIDE_TENSOR": (
        {"N_CPU_MOE": "4", "OVERRIDE_TENSOR": "exps=CPU"},
        INVALID + "N_CPU_MOE: set together with OVERRIDE_TENSOR; both place MoE expert tensors, set only one of them",
    ),
    "override tensor without a buffer type": (
        {"OVERRIDE_TENSOR": "exps"},
        INVALID + "OVERRIDE_TENSOR: 'exps' is invalid: "
        "each entry must read <tensor name regex>=<buffer type>, e.g. 'exps=CPU'",
    ),
    "override tensor with a broken regex": (
        {"OVERRIDE_TENSOR": "blk.(1=CPU"},
        INVALID + "OVERRIDE_TENSOR: 'blk.(1' is not a valid regular expression "
        "(missing ), unterminated subpattern at position 4)",
    ),
    "context that is not a number": ({"CTX_SIZE": "lots"}, "error: invalid configuration: CTX_SIZE='lots' is invalid"),
    "unknown GPU_LAYERS": ({"GPU_LAYERS": "most"}, "error: invalid configuration: GPU_LAYERS='most' is invalid"),
    "unknown cache type": ({"CACHE_TYPE_K": "q3_k"}, INVALID + "CACHE_TYPE_K='q3_k' is invalid: accepted values are"),
    "port out of range": ({"LLM_PORT": "70000"}, "error: invalid configuration: LLM_PORT='70000' is invalid"),
    "zero slots": ({"PARALLEL": "0"}, "error: invalid configuration: PARALLEL='0' is invalid"),
    "alias with a space": (
        {"MODEL_ALIAS": "two words"}, "error: invalid configuration: MODEL_ALIAS='two words' is invalid"
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", ERRORS)
def test_invalid_values_exit_2_naming_the_variable(case, clean_env, capsys):
    env, expected = ERRORS[case]
    for name, value in env.items():
        clean_env.setenv(name, value)
    assert main(["--print"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip().startswith(expected), err


def test_build_argv_rejects_and_warns_directly():
    options = LlamaServerOptions.from_settings(load_settings("/nonexistent.env", MODEL_PATH=MODEL))
    with pytest.raises(ArgvError) as raised:
        build_argv(options.__class__(**{**options.__dict__, "gpu_layers": "-1"}))
    assert raised.value.variable == "GPU_LAYERS"
    with pytest.warns(LlamaArgvWarning, match="speculative decoding"):
        build_argv(options.__class__(**{**options.__dict__, "draft_model_path": "/d.gguf"}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert build_argv(options, binary="/opt/llama/llama-server")[0] == "/opt/llama/llama-server"


def test_api_key_is_never_on_the_command_line(clean_env, capsys):
    clean_env.setenv("LLAMA_API_KEY", "supersecret-123")
    assert main(["--print"]) == 0
    out, err = capsys.readouterr()
    assert "supersecret-123" not in out + err
    assert shlex.split(out)[-2:] == ["--api-key-file", "<in-memory copy of LLAMA_API_KEY>"]
    assert main(["--print", "--api-key-file", "/run/secrets/llama_api_key"]) == 0
    out, _ = capsys.readouterr()
    assert shlex.split(out)[-2:] == ["--api-key-file", "/run/secrets/llama_api_key"]
    assert "supersecret-123" not in out


FAKE_SERVER = """#!{python}
import json, os, sys
argv = sys.argv
key_file = argv[argv.index("--api-key-file") + 1] if "--api-key-file" in argv else None
with open(os.environ["FAKE_SERVER_REPORT"], "w") as out:
    json.dump({{"argv": argv, "env_key": os.environ.get("LLAMA_API_KEY"),
               "key_file": key_file, "key": open(key_file).read() if key_file else None}}, out)
"""


def _exec_fake_server(tmp_path: Path, env: dict[str, str], *extra: str) -> dict:
    fake = tmp_path / "llama-server"
    fake.write_text(FAKE_SERVER.format(python=sys.executable))
    fake.chmod(0o755)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    report = tmp_path / "report.json"
    run_env = {k: v for k, v in os.environ.items() if k not in HsiSettings.model_fields and k != "LLAMA_API_KEY_FILE"}
    run_env.update(
        HSI_ENV_FILE=str(tmp_path / "absent.env"), MODEL_PATH=str(model), FAKE_SERVER_REPORT=str(report), **env
    )
    done = subprocess.run(
        [sys.executable, "-m", "hsi_dagster.llm.argv", "--exec", "--binary", str(fake), *extra],
        env=run_env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(report.read_text())


def test_exec_hands_the_env_key_over_in_memory_only(tmp_path):
    report = _exec_fake_server(tmp_path, {"LLAMA_API_KEY": "supersecret-123"})
    assert "supersecret-123" not in " ".join(report["argv"])
    assert report["env_key"] is None  # llama-server would otherwise read LLAMA_API_KEY itself
    assert report["key"].strip() == "supersecret-123"
    assert report["key_file"].startswith("/proc/self/fd/")


def test_exec_passes_a_secret_file_by_path(tmp_path):
    secret = tmp_path / "llama_api_key"
    secret.write_text("from-the-secret\n")
    report = _exec_fake_server(tmp_path, {"LLAMA_API_KEY": "env-key", "LLAMA_API_KEY_FILE": str(secret)})
    assert report["key_file"] == str(secret) and report["key"] == "from-the-secret\n"
    assert "env-key" not in " ".join(report["argv"]) and report["env_key"] is None


def test_exec_refuses_a_missing_model(tmp_path, clean_env, capsys):
    clean_env.setenv("MODEL_PATH", str(tmp_path / "absent.gguf"))
    assert main(["--exec", "--binary", "/bin/false"]) == 2
    assert "MODEL_PATH" in capsys.readouterr().err


def test_entrypoint_passes_the_secret_file(tmp_path):
    secret = tmp_path / "llama_api_key"
    secret.write_text("k\n")
    env = {k: v for k, v in os.environ.items() if k not in HsiSettings.model_fields}
    env.update(
        PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
        LLAMA_API_KEY_FILE=str(secret), HSI_ENV_FILE=str(tmp_path / "absent.env"), MODEL_PATH=MODEL,
        PYTHONPATH=str(REPO),
    )  # fmt: skip
    done = subprocess.run(
        ["sh", str(REPO / "ai/nemotron/entrypoint.sh"), "--print"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert shlex.split(done.stdout) == [*DEFAULT_ARGV, "--api-key-file", str(secret)]


def test_the_image_copy_list_is_enough_and_pulls_in_nothing_heavy(tmp_path):
    """The server image carries the source its Dockerfile COPYs, next to pydantic and PyYAML: that must suffice, and
    building the server's command line must import nothing heavy (the image has none of it)."""
    import re
    import shutil

    dockerfile = (REPO / "ai/nemotron/Dockerfile").read_text()
    copied = [
        src
        for line in re.findall(r"^COPY (hsi_dagster\S*(?: hsi_dagster/\S+)*) /opt/hsi/app/", dockerfile, re.M)
        for src in line.split()
    ]
    assert "hsi_dagster/llm/argv.py" in copied or "hsi_dagster" in copied
    for src in copied:
        target = tmp_path / src
        if (REPO / src).is_dir():
            shutil.copytree(REPO / src, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes((REPO / src).read_bytes())
    probe = (
        "import sys; from hsi_dagster.llm import argv; "
        f"assert argv.__file__.startswith({str(tmp_path)!r}), argv.__file__; "
        "code = argv.main(['--print']); "
        "heavy = sorted({m.split('.')[0] for m in sys.modules} "
        "& {'dagster', 'duckdb', 'httpx', 'xllamacpp', 'gguf', 'numpy', 'tiktoken', 'yaml'}); "
        "print('HEAVY', heavy); sys.exit(code)"
    )
    env = {k: v for k, v in os.environ.items() if k not in HsiSettings.model_fields}
    env.update(PYTHONPATH=str(tmp_path), HSI_ENV_FILE=str(tmp_path / "absent.env"), MODEL_PATH=MODEL)
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "HEAVY []" in done.stdout
    assert shlex.split(done.stdout.splitlines()[0]) == DEFAULT_ARGV


def test_each_llama_setting_is_parsed_once_into_typed_options():
    """GPU_LAYERS arrives parsed from the settings; OVERRIDE_TENSOR becomes entries that argv, the embedded server
    and the planner share."""
    from hsi_dagster.llm.options import TensorOverride

    settings = load_settings(
        "/nonexistent.env", MODEL_PATH=MODEL, GPU_LAYERS=" 40 ", OVERRIDE_TENSOR=r"blk\.1\.ffn_up_exps=CPU, out=CUDA0"
    )
    options = LlamaServerOptions.from_settings(settings)
    assert options.gpu_layers == 40 and settings.GPU_LAYERS == 40
    assert options.override_tensor == (TensorOverride(r"blk\.1\.ffn_up_exps", "CPU"), TensorOverride("out", "CUDA0"))
    assert [entry.on_cpu for entry in options.override_tensor] == [True, False]
    assert options.override_tensor[0].matches("blk.1.ffn_up_exps.weight")
    assert options.override_tensor_text == r"blk\.1\.ffn_up_exps=CPU,out=CUDA0"
    argv = build_argv(options)
    assert argv[argv.index("--n-gpu-layers") + 1] == "40"
    assert argv[argv.index("--override-tensor") + 1] == r"blk\.1\.ffn_up_exps=CPU,out=CUDA0"
    assert LlamaServerOptions.from_settings(load_settings("/nonexistent.env", GPU_LAYERS="ALL")).gpu_layers == "all"


def test_problems_lists_every_refusal_naming_its_variable():
    """The one function with the checks llama-server would refuse: each problem names the variable to change."""
    import dataclasses

    options = LlamaServerOptions.from_settings(
        load_settings("/nonexistent.env", MODEL_PATH=MODEL, OVERRIDE_TENSOR="exps=CPU", CACHE_TYPE_V="q8_0")
    )
    assert options.problems() == []
    broken = dataclasses.replace(options, flash_attention=False, n_cpu_moe=4, port=0)
    assert [(p.variable, p.detail) for p in broken.problems()] == [
        ("LLM_PORT", "0 is outside 1-65535"),
        ("CACHE_TYPE_V", "q8_0 needs FLASH_ATTENTION=true (llama.cpp refuses a quantized V cache without it)"),
        ("N_CPU_MOE", "set together with OVERRIDE_TENSOR; both place MoE expert tensors, set only one of them"),
    ]
    with pytest.raises(ArgvError, match="^LLM_PORT: "):
        broken.check()
