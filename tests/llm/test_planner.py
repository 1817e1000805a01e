"""The memory model of `hsi plan`: Nemotron-3-Nano's hybrid layout gives the figures the notes derive, placement
follows llama.cpp's rules, and the KV-cache size matches what the real llama.cpp server allocates."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hsi_dagster.llm.gguf import ModelMetadata, read_metadata
from hsi_dagster.llm.model_files import bundled_smollm2_path
from hsi_dagster.llm.options import parse_override_tensor
from hsi_dagster.llm.planner import (
    MIB,
    PlanInputs,
    bytes_per_element,
    format_bytes,
    kv_bytes_per_token,
    plan_from_metadata,
    recurrent_bytes_per_sequence,
)
from tests.support.gguf_fixtures import NEMOTRON_PATTERN, nemotron_q4km_like, write_nemotron_gguf


@pytest.fixture(scope="module")
def nemotron(tmp_path_factory) -> ModelMetadata:
    return read_metadata(write_nemotron_gguf(tmp_path_factory.mktemp("gguf") / "nemotron-fixture.gguf"))


# --- (a) Nemotron-3-Nano's hybrid architecture ---------------------------------------------------------


def test_nemotron_kv_cache_is_6_kib_per_token_at_f16(nemotron):
    # 6 layers x 2 KV heads x (128 + 128) x 2 bytes
    assert kv_bytes_per_token(nemotron, "f16", "f16") == 6 * 1024
    assert kv_bytes_per_token(nemotron, "q8_0", "q8_0") == 6 * 2 * 256 * 34 / 32  # ~3.2 KiB
    assert kv_bytes_per_token(nemotron, "q4_0", "q4_0") == 6 * 2 * 256 * 18 / 32  # ~1.7 KiB


def test_nemotron_recurrent_state_is_about_48_mib_per_sequence(nemotron):
    per_layer = (4 - 1) * (4096 + 2 * 8 * 128) + 128 * 4096  # conv window + SSM state, f32 values
    assert recurrent_bytes_per_sequence(nemotron) == 23 * per_layer * 4
    assert 47 * MIB < recurrent_bytes_per_sequence(nemotron) < 49 * MIB


def test_128k_to_32k_context_saves_about_0_6_gb_not_4_gb(nemotron):
    big = plan_from_metadata(nemotron, PlanInputs(ctx_size=131072, parallel=2))
    small = plan_from_metadata(nemotron, PlanInputs(ctx_size=32768, parallel=2))
    assert big.kv_bytes - small.kv_bytes == 98304 * 6 * 1024  # 576 MiB
    assert small.recurrent_bytes == big.recurrent_bytes == 2 * recurrent_bytes_per_sequence(nemotron)


def test_bytes_per_element_per_cache_type():
    assert bytes_per_element("f16") == 2
    assert bytes_per_element("q8_0") == 34 / 32
    assert bytes_per_element("q4_0") == 18 / 32
    with pytest.raises(ValueError, match="q3_k"):
        bytes_per_element("q3_k")


def test_a_plain_transformer_has_kv_cache_in_every_layer():
    meta = read_metadata(bundled_smollm2_path())
    assert kv_bytes_per_token(meta) == 30 * 3 * (64 + 64) * 2
    assert recurrent_bytes_per_sequence(meta) == 0


def test_format_bytes_picks_a_readable_unit():
    assert (format_bytes(6 * 1024), format_bytes(47.6 * MIB), format_bytes(24 * 1024**3)) == (
        "6.00 KiB",
        "47.6 MiB",
        "24.00 GiB",
    )


# --- placement and the fit verdict (approximate Nemotron-3-Nano Q4_K_M tensor sizes) --------------------


def test_n_cpu_moe_keeps_the_experts_of_the_first_n_layers_on_the_cpu():
    meta = nemotron_q4km_like()
    base = plan_from_metadata(meta, PlanInputs())
    moved = plan_from_metadata(meta, PlanInputs(n_cpu_moe=10))
    moe_layers_below_10 = sum(1 for c in NEMOTRON_PATTERN[:10] if c == "E")
    assert moved.experts_cpu_bytes == moe_layers_below_10 * 740 * MIB  # shared experts stay on the GPU
    assert base.weights_gpu_bytes - moved.weights_gpu_bytes == moved.experts_cpu_bytes
    assert base.weights_cpu_bytes == 231 * MIB  # token embeddings never go to the GPU


def test_override_tensor_with_a_cpu_buffer_moves_what_it_matches():
    meta = nemotron_q4km_like()
    plan = plan_from_metadata(meta, PlanInputs(override_tensor=parse_override_tensor("exps=CPU")))
    assert plan.experts_cpu_bytes == 23 * 740 * MIB
    other = plan_from_metadata(meta, PlanInputs(override_tensor=parse_override_tensor("exps=CUDA0")))
    assert other.experts_cpu_bytes == 0


def test_numeric_gpu_layers_offload_the_last_layers_and_keep_their_state_with_them():
    meta = nemotron_q4km_like()
    plan = plan_from_metadata(meta, PlanInputs(gpu_layers=26))
    attention_on_gpu = sum(1 for c in NEMOTRON_PATTERN[26:] if c == "*")
    assert plan.kv_gpu_bytes == attention_on_gpu * 1024 * plan.kv_cells
    assert plan.kv_bytes == 6 * 1024 * plan.kv_cells
    assert plan.weights_cpu_bytes > plan_from_metadata(meta, PlanInputs()).weights_cpu_bytes


def test_fits_on_24_gib_and_says_what_to_change_on_16_gib():
    meta = nemotron_q4km_like()
    assert plan_from_metadata(meta, PlanInputs(gpu_mem_gib=24)).fits is True
    short = plan_from_metadata(meta, PlanInputs(gpu_mem_gib=16))
    assert short.fits is False and short.headroom_bytes < 0
    advice = next(s for s in short.suggestions if s.startswith("raise N_CPU_MOE to "))
    n = int(re.match(r"raise N_CPU_MOE to (\d+)", advice).group(1))
    assert plan_from_metadata(meta, PlanInputs(gpu_mem_gib=16, n_cpu_moe=n)).fits is True
    assert plan_from_metadata(meta, PlanInputs(gpu_mem_gib=16, n_cpu_moe=n - 1)).fits is False
    assert any("PARALLEL" in s and "saves only" in s for s in short.suggestions)


def test_slot_cells_are_padded_like_llama_cpp():
    assert PlanInputs(ctx_size=4096, parallel=3).slot_cells == 1536
    assert PlanInputs(ctx_size=5000, parallel=3).slot_cells == 1792
    assert PlanInputs(ctx_size=32768, parallel=2).slot_cells == 16384


# --- (b) the real server agrees -------------------------------------------------------------------------

_SERVER_SCRIPT = textwrap.dedent(
    """
    import sys, xllamacpp as x
    p = x.CommonParams()
    p.model.path = sys.argv[1]
    p.n_ctx = int(sys.argv[2]); p.n_parallel = int(sys.argv[3])
    p.cache_type_k = getattr(x.ggml_type, "GGML_TYPE_" + sys.argv[4].upper())
    p.cache_type_v = getattr(x.ggml_type, "GGML_TYPE_" + sys.argv[5].upper())
    p.flash_attn_type = x.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_ENABLED
    p.cpuparams.n_threads = 2
    p.hostnames = ["127.0.0.1"]; p.port = 0; p.warmup = False
    p.fit_params = False  # no trial context: the sizes logged are the real allocation
    p.verbosity = 4  # the llama_kv_cache size line is logged at this level
    server = x.Server(p)
    # Leave without the destructor: deleting a Server right after start sometimes hangs in xllamacpp
    # ("waiting for main loop exit"); the sizes are already logged.
    import os; sys.stderr.flush(); os._exit(0)
    """
)
KV_LINE = re.compile(r"llama_kv_cache: size =\s*([\d.]+) MiB \(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+)/(\d+) seqs\)")
COMPUTE_LINE = re.compile(r"CPU compute buffer size =\s*([\d.]+) MiB")


def _server_memory_report(model: Path, ctx: int, parallel: int, k: str, v: str) -> tuple[float, int, float]:
    """Start the real llama.cpp server (xllamacpp) and read the KV-cache and compute-buffer sizes it logs."""
    done = subprocess.run(
        [sys.executable, "-c", _SERVER_SCRIPT, str(model), str(ctx), str(parallel), k, v],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    log = done.stdout + done.stderr
    kv = KV_LINE.search(log)
    compute = COMPUTE_LINE.search(log)
    assert done.returncode == 0 and kv and compute, log[-3000:]
    return float(kv.group(1)) * MIB, int(kv.group(2)) * int(kv.group(4)), float(compute.group(1)) * MIB


@pytest.mark.llm
@pytest.mark.parametrize(("ctx", "parallel", "k", "v"), [(4096, 2, "q8_0", "f16"), (4096, 3, "f16", "q4_0")])
def test_planner_kv_cache_matches_the_real_server(ctx, parallel, k, v):
    model = bundled_smollm2_path()
    server_kv, server_cells, server_compute = _server_memory_report(model, ctx, parallel, k, v)
    plan = plan_from_metadata(
        read_metadata(model), PlanInputs(ctx_size=ctx, parallel=parallel, cache_type_k=k, cache_type_v=v)
    )
    print(f"ctx={ctx} parallel={parallel} K={k} V={v}: planner KV {plan.kv_bytes / MIB:.2f} MiB, "
          f"server {server_kv / MIB:.2f} MiB; cells {plan.kv_cells} vs {server_cells}; "
          f"compute planner {plan.compute_bytes / MIB:.2f} vs server {server_compute / MIB:.2f} MiB")  # fmt: skip
    assert abs(plan.kv_bytes - server_kv) <= 0.10 * server_kv
    assert plan.kv_cells == server_cells
    assert abs(plan.compute_bytes - server_compute) <= 0.30 * server_compute  # a rough estimate, but not wild
