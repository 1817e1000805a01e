"""The embedded llama.cpp server (hsi_dagster/llm/embedded.py): a REAL subprocess that logs to a file and stops
cleanly, and the settings -> xllamacpp CommonParams mapping."""

from __future__ import annotations

import dataclasses
import os

import httpx
import pytest

from hsi_dagster.llm.embedded import build_params
from hsi_dagster.llm.options import LlamaServerOptions, parse_override_tensor
from hsi_dagster.settings import SettingsError, load_settings
from tests.support.llm_fixtures import start_embedded

llm = pytest.mark.llm


@llm
def test_embedded_process_logs_to_file_and_stops_cleanly_on_sigterm(tmp_path) -> None:
    """The subprocess announces readiness in its log file (not the console) and exits 0 on SIGTERM."""
    process = start_embedded(tmp_path, {"CTX_SIZE": 4096, "PARALLEL": 1, "THREADS": 2})
    try:
        assert process.running and process.pid
        assert httpx.get(f"{process.url}/health").status_code == 200
    finally:
        code = process.stop()
    assert code == 0
    assert not process.running
    log = process.log_path.read_text()
    assert f"llama.cpp server ready at {process.url} (model SmolLM2-135M-Instruct.Q4_1, 1 slots x 4096 tokens" in log
    assert "llama.cpp server stopped" in log
    assert " I srv " not in log  # info-level C++ chatter is turned down (verbosity 2: warnings and errors)


def _options(**overrides: object) -> LlamaServerOptions:
    settings = load_settings(env_file=os.devnull, CTX_SIZE=8192, PARALLEL=2, THREADS=2, LLM_PORT=18555)
    return dataclasses.replace(LlamaServerOptions.from_settings(settings), **overrides)


def test_build_params_maps_every_option() -> None:
    """Each overlapping setting lands in the matching xllamacpp CommonParams field."""
    import xllamacpp

    options = _options(
        cache_type_k="q8_0",
        cache_type_v="q4_0",
        gpu_layers="all",
        api_key="k1",
        cache_reuse=128,
        cache_ram_mib=64,
        batch_size=256,
        n_cpu_moe=2,
        override_tensor=(),
        host="0.0.0.0",
    )
    params = build_params(options)
    assert params.model.path == str(options.model_path)
    assert params.hostnames == ["0.0.0.0"] and params.port == 18555
    assert params.n_ctx == 8192 and params.n_parallel == 2 and params.kv_unified is False
    assert params.flash_attn_type == xllamacpp.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_ENABLED
    assert params.cache_type_k == xllamacpp.ggml_type.GGML_TYPE_Q8_0
    assert params.cache_type_v == xllamacpp.ggml_type.GGML_TYPE_Q4_0
    assert params.cache_ram_mib == 64
    assert params.n_cache_reuse == 128 and params.n_batch == 256 and params.n_ubatch == 256
    assert params.cpuparams.n_threads == 2 and params.cpuparams_batch.n_threads == 2
    low = xllamacpp.ggml_sched_priority(-1)  # PRIO default: compute threads at nice 5, SCHED_BATCH
    assert params.cpuparams.priority == low and params.cpuparams_batch.priority == low
    assert build_params(_options(priority=0)).cpuparams.priority == xllamacpp.ggml_sched_priority(0)
    assert params.api_keys == ["k1"]
    assert params.n_gpu_layers == -2  # xllamacpp: -1 auto, <= -2 all
    assert params.tensor_buft_overrides == r"blk\.0\.ffn_(up|down|gate)_exps=CPU,blk\.1\.ffn_(up|down|gate)_exps=CPU"
    assert params.endpoint_metrics and params.endpoint_slots and params.cont_batching
    assert params.verbosity == 2
    assert build_params(_options(gpu_layers="auto")).n_gpu_layers == -1
    assert build_params(_options(gpu_layers=12)).n_gpu_layers == 12


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"gpu_layers": "most"}, "GPU_LAYERS: 'most' is invalid"),
        ({"cache_type_k": "q3_k"}, "CACHE_TYPE_K: 'q3_k' is invalid"),
        ({"model_path": "/nonexistent/model.gguf"}, "MODEL_PATH='/nonexistent/model.gguf'"),
        ({"mlock": True}, "MLOCK=true"),
        (
            {"cache_type_v": "q8_0", "flash_attention": False},
            "CACHE_TYPE_V: q8_0 needs FLASH_ATTENTION=true",
        ),
        ({"override_tensor": parse_override_tensor("exps=NOSUCHDEVICE")}, "OVERRIDE_TENSOR='exps=NOSUCHDEVICE'"),
        ({"draft_model_path": "/nonexistent/draft.gguf"}, "DRAFT_MODEL_PATH='/nonexistent/draft.gguf'"),
    ],
)
def test_build_params_rejects_what_xllamacpp_cannot_take(overrides: dict, named: str) -> None:
    """Values xllamacpp would refuse (or silently misread) fail early with the variable named."""
    with pytest.raises(SettingsError) as err:
        build_params(_options(**overrides))
    assert named in str(err.value)
