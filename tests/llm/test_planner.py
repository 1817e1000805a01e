"""`hsi plan`: Nemotron-3-Nano's hybrid layout gives the memory figures the notes derive, the header reader
agrees with the gguf package, and the KV-cache size matches what the real llama.cpp server allocates."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import gguf
import numpy as np
import pytest

from hsi_dagster.llm.model_files import bundled_smollm2_path
from hsi_dagster.llm.planner import (
    MIB,
    ModelMetadata,
    PlanInputs,
    TensorInfo,
    add_plan_arguments,
    bytes_per_element,
    metadata_from_fields,
    plan_from_metadata,
    read_metadata,
    run_plan,
)

# Nemotron-3-Nano-30B-A3B: M = Mamba-2, E = MoE, * = attention (hybrid_override_pattern of the HF config).
NEMOTRON_PATTERN = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
ARCH = "nemotron_h_moe"


def nemotron_fields() -> dict:
    """Nemotron-3-Nano's GGUF metadata, under the key names llama.cpp reads (nemotron_h_moe.ssm.*, ...)."""
    return {
        "general.architecture": ARCH,
        "general.name": "Nemotron-3-Nano-30B-A3B (fixture)",
        f"{ARCH}.block_count": 52,
        f"{ARCH}.context_length": 1048576,
        f"{ARCH}.embedding_length": 2688,
        f"{ARCH}.vocab_size": 131072,
        # per layer: the MoE layers carry an FFN length, Mamba and attention layers 0
        f"{ARCH}.feed_forward_length": [1856 if c == "E" else 0 for c in NEMOTRON_PATTERN],
        f"{ARCH}.attention.head_count": 32,
        f"{ARCH}.attention.head_count_kv": [2 if c == "*" else 0 for c in NEMOTRON_PATTERN],
        f"{ARCH}.attention.key_length": 128,
        f"{ARCH}.attention.value_length": 128,
        f"{ARCH}.ssm.conv_kernel": 4,
        f"{ARCH}.ssm.inner_size": 4096,  # 64 Mamba heads x head dim 64
        f"{ARCH}.ssm.state_size": 128,
        f"{ARCH}.ssm.time_step_rank": 64,
        f"{ARCH}.ssm.group_count": 8,
        f"{ARCH}.expert_count": 128,
        f"{ARCH}.expert_used_count": 6,
        f"{ARCH}.expert_feed_forward_length": 1856,
        f"{ARCH}.expert_shared_feed_forward_length": 3712,
    }


@pytest.fixture(scope="module")
def nemotron_gguf(tmp_path_factory) -> Path:
    """A real GGUF file with Nemotron-3-Nano's metadata and a few small tensors (one quantized)."""
    path = tmp_path_factory.mktemp("gguf") / "nemotron-fixture.gguf"
    writer = gguf.GGUFWriter(str(path), ARCH)
    f = nemotron_fields()
    writer.add_name(f["general.name"])
    writer.add_block_count(52)
    writer.add_context_length(f[f"{ARCH}.context_length"])
    writer.add_embedding_length(2688)
    writer.add_vocab_size(131072)
    writer.add_feed_forward_length(f[f"{ARCH}.feed_forward_length"])
    writer.add_head_count(32)
    writer.add_head_count_kv(f[f"{ARCH}.attention.head_count_kv"])
    writer.add_key_length(128)
    writer.add_value_length(128)
    writer.add_ssm_conv_kernel(4)
    writer.add_ssm_inner_size(4096)
    writer.add_ssm_state_size(128)
    writer.add_ssm_time_step_rank(64)
    writer.add_ssm_group_count(8)
    writer.add_expert_count(128)
    writer.add_expert_used_count(6)
    writer.add_expert_feed_forward_length(1856)
    writer.add_expert_shared_feed_forward_length(3712)
    writer.add_token_list([f"t{i}" for i in range(64)])  # a string array the reader must skip correctly
    writer.add_tensor("token_embd.weight", np.zeros((8, 16), dtype=np.float32))
    writer.add_tensor("blk.1.ffn_up_exps.weight", np.zeros((4, 8, 16), dtype=np.float16))
    writer.add_tensor("blk.1.ffn_down_exps.weight", np.zeros((4, 16, 8), dtype=np.float16))
    writer.add_tensor("blk.1.ffn_up_shexp.weight", np.zeros((8, 16), dtype=np.float16))
    # q8_0: 2 rows x 64 values = 4 blocks of 34 bytes
    writer.add_tensor(
        "blk.5.attn_k.weight", np.zeros((2, 68), dtype=np.uint8), raw_dtype=gguf.GGMLQuantizationType.Q8_0
    )
    writer.add_tensor("output.weight", np.zeros((8, 16), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def nemotron(nemotron_gguf) -> ModelMetadata:
    return read_metadata(nemotron_gguf)


# --- (a) Nemotron-3-Nano's hybrid architecture ---------------------------------------------------------


def test_nemotron_layer_roles_come_from_the_per_layer_arrays(nemotron):
    assert nemotron.architecture == ARCH
    assert nemotron.attention_layers == tuple(i for i, c in enumerate(NEMOTRON_PATTERN) if c == "*")
    assert nemotron.recurrent_layers == tuple(i for i, c in enumerate(NEMOTRON_PATTERN) if c == "M")
    assert (len(nemotron.attention_layers), len(nemotron.recurrent_layers)) == (6, 23)
    assert nemotron.is_hybrid and nemotron.is_moe


def test_nemotron_kv_cache_is_6_kib_per_token_at_f16(nemotron):
    # 6 layers x 2 KV heads x (128 + 128) x 2 bytes
    assert nemotron.kv_bytes_per_token("f16", "f16") == 6 * 1024
    assert nemotron.kv_bytes_per_token("q8_0", "q8_0") == 6 * 2 * 256 * 34 / 32  # ~3.2 KiB
    assert nemotron.kv_bytes_per_token("q4_0", "q4_0") == 6 * 2 * 256 * 18 / 32  # ~1.7 KiB


def test_nemotron_recurrent_state_is_about_48_mib_per_sequence(nemotron):
    per_layer = (4 - 1) * (4096 + 2 * 8 * 128) + 128 * 4096  # conv window + SSM state, f32 values
    assert nemotron.recurrent_bytes_per_sequence() == 23 * per_layer * 4
    assert 47 * MIB < nemotron.recurrent_bytes_per_sequence() < 49 * MIB


def test_128k_to_32k_context_saves_about_0_6_gb_not_4_gb(nemotron):
    big = plan_from_metadata(nemotron, PlanInputs(ctx_size=131072, parallel=2))
    small = plan_from_metadata(nemotron, PlanInputs(ctx_size=32768, parallel=2))
    assert big.kv_bytes - small.kv_bytes == 98304 * 6 * 1024  # 576 MiB
    assert small.recurrent_bytes == big.recurrent_bytes == 2 * nemotron.recurrent_bytes_per_sequence()


def test_bytes_per_element_per_cache_type():
    assert bytes_per_element("f16") == 2
    assert bytes_per_element("q8_0") == 34 / 32
    assert bytes_per_element("q4_0") == 18 / 32
    with pytest.raises(ValueError, match="q3_k"):
        bytes_per_element("q3_k")


# --- the header reader ---------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["smollm2", "nemotron"])
def test_header_reader_agrees_with_the_gguf_package(which, nemotron_gguf):
    path = bundled_smollm2_path() if which == "smollm2" else nemotron_gguf
    ours = read_metadata(path)
    reference = gguf.GGUFReader(path)
    assert [(t.name, t.n_bytes) for t in ours.tensors] == [(t.name, int(t.n_bytes)) for t in reference.tensors]
    arch = ours.architecture
    assert ours.n_layer == reference.fields[f"{arch}.block_count"].contents()
    assert ours.n_embd == reference.fields[f"{arch}.embedding_length"].contents()
    head_count_kv = reference.fields[f"{arch}.attention.head_count_kv"].contents()
    assert list(ours.n_head_kv) == (
        head_count_kv if isinstance(head_count_kv, list) else [head_count_kv] * ours.n_layer
    )


def test_quantized_tensor_size_comes_from_its_block_layout(nemotron):
    sizes = {t.name: t.n_bytes for t in nemotron.tensors}
    assert sizes["blk.5.attn_k.weight"] == 4 * 34


def test_fields_of_a_plain_transformer_have_no_recurrent_layers():
    meta = read_metadata(bundled_smollm2_path())
    assert meta.architecture == "llama" and meta.recurrent_layers == () and len(meta.attention_layers) == 30
    assert meta.kv_bytes_per_token() == 30 * 3 * (64 + 64) * 2


def test_a_big_endian_file_reads_the_same(tmp_path):
    path = tmp_path / "be.gguf"
    writer = gguf.GGUFWriter(str(path), "llama", endianess=gguf.GGUFEndian.BIG)
    writer.add_block_count(2)
    writer.add_embedding_length(64)
    writer.add_head_count(4)
    writer.add_head_count_kv([2, 1])
    writer.add_tensor("blk.0.attn_k.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    meta = read_metadata(path)
    assert (meta.n_layer, meta.n_embd, meta.n_head_kv, meta.key_length) == (2, 64, (2, 1), 16)
    assert [(t.name, t.n_bytes) for t in meta.tensors] == [("blk.0.attn_k.weight", 128)]


def test_a_file_that_is_not_gguf_is_refused(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not a gguf at all")
    with pytest.raises(ValueError, match="not a GGUF"):
        read_metadata(bad)


# --- placement and the fit verdict (approximate Nemotron-3-Nano Q4_K_M tensor sizes) --------------------


def nemotron_q4km_like() -> ModelMetadata:
    """Nemotron-3-Nano metadata with tensor sizes close to a Q4_K_M file (~18 GiB): for placement tests."""
    tensors = [TensorInfo("token_embd.weight", 231 * MIB), TensorInfo("output.weight", 275 * MIB)]
    for il, kind in enumerate(NEMOTRON_PATTERN):
        if kind == "E":
            tensors += [
                TensorInfo(f"blk.{il}.ffn_up_exps.weight", 370 * MIB),
                TensorInfo(f"blk.{il}.ffn_down_exps.weight", 370 * MIB),
                TensorInfo(f"blk.{il}.ffn_up_shexp.weight", 6 * MIB),
                TensorInfo(f"blk.{il}.ffn_down_shexp.weight", 6 * MIB),
            ]
        elif kind == "M":
            tensors += [
                TensorInfo(f"blk.{il}.ssm_in.weight", 16 * MIB),
                TensorInfo(f"blk.{il}.ssm_out.weight", 7 * MIB),
            ]
        else:
            tensors += [
                TensorInfo(f"blk.{il}.attn_q.weight", 7 * MIB),
                TensorInfo(f"blk.{il}.attn_output.weight", 7 * MIB),
            ]
    return metadata_from_fields(nemotron_fields(), tensors)


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
    plan = plan_from_metadata(meta, PlanInputs(override_tensor="exps=CPU"))
    assert plan.experts_cpu_bytes == 23 * 740 * MIB
    other = plan_from_metadata(meta, PlanInputs(override_tensor="exps=CUDA0"))
    assert other.experts_cpu_bytes == 0


def test_numeric_gpu_layers_offload_the_last_layers_and_keep_their_state_with_them():
    meta = nemotron_q4km_like()
    plan = plan_from_metadata(meta, PlanInputs(gpu_layers="26"))
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


# --- CLI -----------------------------------------------------------------------------------------------


def _run_cli(*argv: str, capsys) -> tuple[int, str]:
    import argparse

    code = run_plan(add_plan_arguments(argparse.ArgumentParser()).parse_args(list(argv)))
    return code, capsys.readouterr().out


def test_cli_exit_codes(tmp_path, monkeypatch, capsys, nemotron_gguf):
    monkeypatch.setenv("HSI_ENV_FILE", str(tmp_path / "absent.env"))
    code, out = _run_cli("--model", str(nemotron_gguf), "--gpu-mem-gib", "24", capsys=capsys)
    assert code == 0 and "fits" in out and "6.00 KiB/token" in out and "47.6 MiB/slot" in out
    code, out = _run_cli("--gpu-mem-gib", "0.5", capsys=capsys)  # SmolLM2 with the 400 MiB CUDA overhead
    assert code == 1 and "DOES NOT FIT" in out
    code, _ = _run_cli("--model", str(tmp_path / "missing.gguf"), capsys=capsys)
    assert code == 2


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
