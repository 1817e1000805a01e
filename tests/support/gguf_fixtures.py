"""Nemotron-3-Nano-30B-A3B as test data: its GGUF metadata, a small real GGUF file with it, and a metadata object
with tensor sizes close to a Q4_K_M file. Shared by tests/llm/test_gguf.py, test_planner.py and test_config_check.py.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from hsi_dagster.llm.gguf import ModelMetadata, TensorInfo, metadata_from_fields

MIB = 1024**2

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


def write_nemotron_gguf(path: Path) -> Path:
    """A real GGUF file with Nemotron-3-Nano's metadata and a few small tensors (one quantized)."""
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
