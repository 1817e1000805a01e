"""`hsi plan`: will these settings fit on this GPU? A capacity estimate read from the GGUF header alone.

Why it exists: the seed design sized VRAM as if Nemotron-3-Nano were a dense transformer (KV cache in every
layer). It is a hybrid: only the attention layers hold a KV cache (6 of 52), every Mamba-2 layer holds a
fixed-size recurrent state per sequence in f32, and most of the weights are MoE experts that can stay in host
RAM (N_CPU_MOE). This planner counts each part from the model's own metadata.

What it counts, and how well:
- weights: exact tensor sizes from the tensor infos (no tensor data is read). Placement follows llama.cpp:
  token embeddings stay on the CPU; with GPU_LAYERS=N the last N layers go to the GPU (more than the layer
  count also moves the output layer); N_CPU_MOE=K keeps the `ffn_*_exps` tensors of layers 0..K-1 on the CPU;
  OVERRIDE_TENSOR entries with a CPU buffer keep the tensors they match (Python `re.search`) on the CPU.
- KV cache: attention layers only (head_count_kv > 0, and for Nemotron-H also n_ff == 0 marks a Mamba
  layer), K and V bytes per element per cache type (q8_0 = 34/32, q4_0 = 18/32, ...). Cells are sized as the
  pinned llama.cpp does it: each slot gets ceil(CTX_SIZE / PARALLEL) rounded up to a multiple of 256.
  Checked against the real embedded server in tests/llm/test_planner.py. Sliding-window layers are not modelled
  (over-estimates SWA models).
- recurrent state: per recurrent layer (d_conv - 1) * (d_inner + 2 * n_group * d_state) conv values plus
  d_state * d_inner SSM values, in f32, once per slot. Cache types do not apply to it.
- compute buffers: a ROUGH estimate: n_ubatch (512) tokens x (6 * n_embd + the widest FFN/MoE/SSM
  projection x 3) floats, plus the attention-score matrix of one layer when flash attention is off, plus the
  logits of one token per slot. Within ~5 % of the CPU compute buffer of the small test model; on CUDA
  llama.cpp adds graph-split copies, so a fixed CUDA overhead (context, cuBLAS workspace) and llama.cpp's
  own 1 GiB free-memory margin (--fit-target) are added before judging the fit.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import struct
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

import gguf

MIB = 1024**2
GIB = 1024**3

# llama.cpp pads each sequence's KV cells to a multiple of this (measured: 4096/3 slots -> 1536 cells each).
KV_CELL_PADDING = 256
DEFAULT_UBATCH = 512  # llama-server --ubatch-size default; the project does not change it
DEFAULT_MARGIN_MIB = 1024  # llama.cpp --fit-target default: free memory it leaves on each device
DEFAULT_CUDA_OVERHEAD_MIB = 400  # CUDA context + cuBLAS workspace, not in llama.cpp's buffer sizes
RECURRENT_STATE_BYTES = 4  # Mamba conv/SSM state is always f32

# Expert tensors as llama.cpp's --n-cpu-moe names them: blk.N.ffn_{up,down,gate,gate_up}_{,ch}exps.*
EXPERT_TENSOR = re.compile(r"^blk\.(\d+)\.ffn_(up|down|gate|gate_up)_(ch)?exps\b")
LAYER_TENSOR = re.compile(r"^blk\.(\d+)\.")
PURE_RECURRENT_ARCHS = ("mamba", "mamba2")

CACHE_TYPE_TO_GGML = {
    "f32": gguf.GGMLQuantizationType.F32,
    "f16": gguf.GGMLQuantizationType.F16,
    "bf16": gguf.GGMLQuantizationType.BF16,
    "q8_0": gguf.GGMLQuantizationType.Q8_0,
    "q4_0": gguf.GGMLQuantizationType.Q4_0,
    "q4_1": gguf.GGMLQuantizationType.Q4_1,
    "iq4_nl": gguf.GGMLQuantizationType.IQ4_NL,
    "q5_0": gguf.GGMLQuantizationType.Q5_0,
    "q5_1": gguf.GGMLQuantizationType.Q5_1,
}


def bytes_per_element(cache_type: str) -> float:
    """Bytes one cached value takes: block bytes / block size (q8_0 = 34/32, q4_0 = 18/32, f16 = 2)."""
    try:
        block_size, type_size = gguf.GGML_QUANT_SIZES[CACHE_TYPE_TO_GGML[cache_type]]
    except KeyError:
        raise ValueError(
            f"unknown cache type {cache_type!r}: accepted values are {', '.join(CACHE_TYPE_TO_GGML)}"
        ) from None
    return type_size / block_size


# --------------------------------------------------------------------------------------------------------
# Reading the header
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorInfo:
    name: str
    n_bytes: int

    @property
    def layer(self) -> int | None:
        match = LAYER_TENSOR.match(self.name)
        return int(match.group(1)) if match else None

    @property
    def is_expert(self) -> bool:
        return EXPERT_TENSOR.match(self.name) is not None


@dataclass(frozen=True)
class ModelMetadata:
    """What the planner needs from a GGUF header; per-layer values are tuples of length n_layer."""

    architecture: str
    n_layer: int
    n_embd: int
    n_head: tuple[int, ...]
    n_head_kv: tuple[int, ...]
    n_ff: tuple[int, ...]
    key_length: int
    value_length: int
    n_vocab: int = 0
    n_ctx_train: int = 0
    name: str = ""
    ssm_d_conv: int = 0
    ssm_d_inner: int = 0
    ssm_d_state: int = 0
    ssm_n_group: int = 0
    ssm_dt_rank: int = 0
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0
    n_ff_shexp: int = 0
    tensors: tuple[TensorInfo, ...] = ()
    path: str | None = None

    # --- layer roles ---
    @property
    def recurrent_layers(self) -> tuple[int, ...]:
        """Layers with a Mamba state. Nemotron-H: n_head_kv == 0 and n_ff == 0 (else it is an MoE/FFN layer)."""
        if self.architecture in PURE_RECURRENT_ARCHS:
            return tuple(range(self.n_layer))
        if self.ssm_d_state <= 0:
            return ()
        if self.architecture.startswith("nemotron_h"):
            return tuple(il for il in range(self.n_layer) if self.n_head_kv[il] == 0 and self.n_ff[il] == 0)
        return tuple(il for il in range(self.n_layer) if self.n_head_kv[il] == 0)

    @property
    def attention_layers(self) -> tuple[int, ...]:
        recurrent = set(self.recurrent_layers)
        return tuple(il for il in range(self.n_layer) if self.n_head_kv[il] > 0 and il not in recurrent)

    @property
    def is_hybrid(self) -> bool:
        return bool(self.recurrent_layers) and bool(self.attention_layers)

    @property
    def is_moe(self) -> bool:
        return self.n_expert > 0

    # --- per-token and per-sequence state ---
    def kv_bytes_per_token(
        self, cache_type_k: str = "f16", cache_type_v: str = "f16", layers: Sequence[int] | None = None
    ) -> float:
        """K + V bytes one token occupies across `layers` (default: every attention layer)."""
        chosen = self.attention_layers if layers is None else [il for il in layers if il in set(self.attention_layers)]
        k_per_elem, v_per_elem = bytes_per_element(cache_type_k), bytes_per_element(cache_type_v)
        return sum(
            self.n_head_kv[il] * (self.key_length * k_per_elem + self.value_length * v_per_elem) for il in chosen
        )

    @property
    def recurrent_values_per_layer(self) -> int:
        """f32 values of one sequence's state in one Mamba layer: conv window + SSM state (llama.cpp n_embd_r + n_embd_s)."""
        conv = max(self.ssm_d_conv - 1, 0) * (self.ssm_d_inner + 2 * self.ssm_n_group * self.ssm_d_state)
        return conv + self.ssm_d_state * self.ssm_d_inner

    def recurrent_bytes_per_sequence(self, layers: Sequence[int] | None = None) -> int:
        chosen = self.recurrent_layers if layers is None else [il for il in layers if il in set(self.recurrent_layers)]
        return len(chosen) * self.recurrent_values_per_layer * RECURRENT_STATE_BYTES

    @property
    def weights_bytes(self) -> int:
        return sum(t.n_bytes for t in self.tensors)


_SCALAR_FORMATS = {
    gguf.GGUFValueType.UINT8: "B",
    gguf.GGUFValueType.INT8: "b",
    gguf.GGUFValueType.UINT16: "H",
    gguf.GGUFValueType.INT16: "h",
    gguf.GGUFValueType.UINT32: "I",
    gguf.GGUFValueType.INT32: "i",
    gguf.GGUFValueType.FLOAT32: "f",
    gguf.GGUFValueType.BOOL: "?",
    gguf.GGUFValueType.UINT64: "Q",
    gguf.GGUFValueType.INT64: "q",
    gguf.GGUFValueType.FLOAT64: "d",
}


class _HeaderReader:
    """Sequential GGUF header parser: reads key/values and tensor infos, never the tensor data."""

    def __init__(self, handle: BinaryIO, path: str) -> None:
        self.handle = handle
        self.path = path
        self.endian = "<"

    def _unpack(self, fmt: str) -> Any:
        size = struct.calcsize(self.endian + fmt)
        data = self.handle.read(size)
        if len(data) != size:
            raise ValueError(f"{self.path}: truncated GGUF header")
        return struct.unpack(self.endian + fmt, data)[0]

    def _string(self) -> str:
        length = self._unpack("Q")
        return self.handle.read(length).decode("utf-8", errors="replace")

    def _value(self, value_type: int, keep: bool) -> Any:
        if value_type == gguf.GGUFValueType.STRING:
            if keep:
                return self._string()
            self.handle.seek(self._unpack("Q"), 1)
            return None
        if value_type == gguf.GGUFValueType.ARRAY:
            item_type = self._unpack("I")
            count = self._unpack("Q")
            if item_type in _SCALAR_FORMATS and item_type != gguf.GGUFValueType.BOOL:
                fmt = _SCALAR_FORMATS[gguf.GGUFValueType(item_type)]
                raw = self.handle.read(count * struct.calcsize(self.endian + fmt))
                return list(struct.unpack(f"{self.endian}{count}{fmt}", raw)) if keep else _ArrayLength(count)
            items = [self._value(item_type, keep=False) for _ in range(count)]
            return items if keep and item_type != gguf.GGUFValueType.STRING else _ArrayLength(count)
        return self._unpack(_SCALAR_FORMATS[gguf.GGUFValueType(value_type)])

    def read(self) -> tuple[dict[str, Any], list[TensorInfo]]:
        if self.handle.read(4) != b"GGUF":
            raise ValueError(f"{self.path}: not a GGUF file")
        version_bytes = self.handle.read(4)
        version = struct.unpack("<I", version_bytes)[0]
        if version & 0xFFFF == 0:  # a big-endian file reads as a huge little-endian number
            self.endian = ">"
            version = struct.unpack(">I", version_bytes)[0]
        if version < 2:
            raise ValueError(f"{self.path}: GGUF version {version} is too old")
        n_tensors = self._unpack("Q")
        n_kv = self._unpack("Q")
        fields: dict[str, Any] = {}
        for _ in range(n_kv):
            key = self._string()
            value_type = self._unpack("I")
            fields[key] = self._value(value_type, keep=True)
        tensors = []
        for _ in range(n_tensors):
            name = self._string()
            n_dims = self._unpack("I")
            dims = [self._unpack("Q") for _ in range(n_dims)]
            ggml_type = gguf.GGMLQuantizationType(self._unpack("I"))
            self._unpack("Q")  # data offset: not needed
            block_size, type_size = gguf.GGML_QUANT_SIZES[ggml_type]
            tensors.append(TensorInfo(name, math.prod(dims) // block_size * type_size))
        return fields, tensors


class _ArrayLength(int):
    """Stands in for an array the planner only needs the length of (tokenizer lists)."""


def _per_layer(value: Any, n_layer: int, default: int = 0) -> tuple[int, ...]:
    if value is None:
        return (default,) * n_layer
    if isinstance(value, list):
        values = [int(v) for v in value[:n_layer]]
        return tuple(values + [values[-1] if values else default] * (n_layer - len(values)))
    return (int(value),) * n_layer


def metadata_from_fields(
    fields: dict[str, Any], tensors: Sequence[TensorInfo] = (), path: str | None = None
) -> ModelMetadata:
    """Build ModelMetadata from GGUF key/values (real key names: `{arch}.ssm.inner_size`, ...)."""
    arch = str(fields.get(gguf.Keys.General.ARCHITECTURE) or "")
    if not arch:
        raise ValueError(f"{path or 'GGUF'}: general.architecture is missing")

    def key(template: str, default: Any = None) -> Any:
        return fields.get(template.format(arch=arch), default)

    n_layer = int(key(gguf.Keys.LLM.BLOCK_COUNT, 0))
    n_embd = int(key(gguf.Keys.LLM.EMBEDDING_LENGTH, 0))
    n_head = _per_layer(key(gguf.Keys.Attention.HEAD_COUNT), n_layer)
    n_head_kv_raw = key(gguf.Keys.Attention.HEAD_COUNT_KV)
    n_head_kv = _per_layer(n_head_kv_raw, n_layer) if n_head_kv_raw is not None else n_head
    max_head = max(n_head, default=0) or 1
    vocab = key(gguf.Keys.LLM.VOCAB_SIZE) or fields.get(gguf.Keys.Tokenizer.LIST) or 0
    return ModelMetadata(
        architecture=arch,
        name=str(fields.get(gguf.Keys.General.NAME) or ""),
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_ff=_per_layer(key(gguf.Keys.LLM.FEED_FORWARD_LENGTH), n_layer),
        key_length=int(key(gguf.Keys.Attention.KEY_LENGTH) or n_embd // max_head),
        value_length=int(key(gguf.Keys.Attention.VALUE_LENGTH) or n_embd // max_head),
        n_vocab=int(vocab if not isinstance(vocab, list) else len(vocab)),
        n_ctx_train=int(key(gguf.Keys.LLM.CONTEXT_LENGTH, 0)),
        ssm_d_conv=int(key(gguf.Keys.SSM.CONV_KERNEL, 0)),
        ssm_d_inner=int(key(gguf.Keys.SSM.INNER_SIZE, 0)),
        ssm_d_state=int(key(gguf.Keys.SSM.STATE_SIZE, 0)),
        ssm_n_group=int(key(gguf.Keys.SSM.GROUP_COUNT, 0)),
        ssm_dt_rank=int(key(gguf.Keys.SSM.TIME_STEP_RANK, 0)),
        n_expert=int(key(gguf.Keys.LLM.EXPERT_COUNT, 0)),
        n_expert_used=int(key(gguf.Keys.LLM.EXPERT_USED_COUNT, 0)),
        n_ff_exp=int(max(_per_layer(key(gguf.Keys.LLM.EXPERT_FEED_FORWARD_LENGTH), max(n_layer, 1)))),
        n_ff_shexp=int(key(gguf.Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH, 0)),
        tensors=tuple(tensors),
        path=path,
    )


def read_metadata(gguf_path: str | Path) -> ModelMetadata:
    """Read a GGUF's header (key/values and tensor infos) with a sequential reader; tensor data is never read."""
    path = str(gguf_path)
    with open(path, "rb") as handle:
        fields, tensors = _HeaderReader(handle, path).read()
    return metadata_from_fields(fields, tensors, path=path)


# --------------------------------------------------------------------------------------------------------
# Planning
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanInputs:
    """The settings the plan depends on (names mirror the .env variables)."""

    ctx_size: int = 32768
    parallel: int = 2
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    gpu_layers: str = "auto"
    n_cpu_moe: int | None = None
    override_tensor: str | None = None
    flash_attention: bool = True
    batch_size: int = 2048
    gpu_mem_gib: float | None = None
    ubatch_size: int = DEFAULT_UBATCH
    margin_mib: int = DEFAULT_MARGIN_MIB
    cuda_overhead_mib: int = DEFAULT_CUDA_OVERHEAD_MIB

    @classmethod
    def from_settings(cls, settings: Any, *, gpu_mem_gib: float | None = None) -> PlanInputs:
        """From HsiSettings (or anything with the same variable names)."""
        return cls(
            ctx_size=settings.CTX_SIZE,
            parallel=settings.PARALLEL,
            cache_type_k=settings.CACHE_TYPE_K,
            cache_type_v=settings.CACHE_TYPE_V,
            gpu_layers=str(settings.GPU_LAYERS),
            n_cpu_moe=settings.N_CPU_MOE,
            override_tensor=settings.OVERRIDE_TENSOR,
            flash_attention=settings.FLASH_ATTENTION,
            batch_size=settings.BATCH_SIZE,
            gpu_mem_gib=gpu_mem_gib,
        )

    @property
    def slot_cells(self) -> int:
        """KV cells (tokens) each slot really gets: ceil(CTX_SIZE / PARALLEL) padded up to 256."""
        per_slot = -(-self.ctx_size // self.parallel)
        return -(-per_slot // KV_CELL_PADDING) * KV_CELL_PADDING


@dataclass(frozen=True)
class Plan:
    model: str
    architecture: str
    n_layer: int
    attention_layers: int
    recurrent_layers: int
    n_expert: int
    inputs: PlanInputs
    slot_cells: int
    kv_cells: int
    kv_bytes_per_token: float
    weights_total_bytes: int
    weights_gpu_bytes: int
    weights_cpu_bytes: int
    experts_cpu_bytes: int
    kv_bytes: int
    kv_gpu_bytes: int
    recurrent_bytes_per_seq: int
    recurrent_bytes: int
    recurrent_gpu_bytes: int
    compute_bytes: int
    overhead_bytes: int
    gpu_total_bytes: int
    host_bytes: int
    gpu_mem_bytes: int | None
    margin_bytes: int
    fits: bool | None
    suggestions: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def headroom_bytes(self) -> int | None:
        """GPU memory left after the estimate and llama.cpp's margin (negative: does not fit)."""
        if self.gpu_mem_bytes is None:
            return None
        return self.gpu_mem_bytes - self.gpu_total_bytes - self.margin_bytes

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["headroom_bytes"] = self.headroom_bytes
        return data


def _override_cpu_patterns(override_tensor: str | None) -> list[re.Pattern[str]]:
    if not override_tensor:
        return []
    patterns = []
    for entry in override_tensor.split(","):
        pattern, _, buffer = entry.strip().partition("=")
        if pattern and buffer.strip().upper().startswith("CPU"):
            patterns.append(re.compile(pattern))
    return patterns


def _gpu_layer_count(gpu_layers: str, n_layer: int) -> int:
    value = str(gpu_layers).strip().lower()
    if value in ("auto", "all"):
        return n_layer + 1
    return int(value)


def _compute_bytes(meta: ModelMetadata, inputs: PlanInputs, slot_cells: int) -> int:
    """Rough compute-buffer size (see the module docstring)."""
    ubatch = min(inputs.batch_size, inputs.ubatch_size)
    widest = 3 * max(meta.n_ff, default=0)
    if meta.is_moe:
        widest = max(widest, 3 * (meta.n_expert_used * meta.n_ff_exp + meta.n_ff_shexp))
    if meta.recurrent_layers:
        in_proj = 2 * meta.ssm_d_inner + 2 * meta.ssm_n_group * meta.ssm_d_state + meta.ssm_dt_rank
        widest = max(widest, 2 * in_proj)
    total = ubatch * 4 * (6 * meta.n_embd + widest)
    if not inputs.flash_attention and meta.attention_layers:
        total += ubatch * slot_cells * max(meta.n_head) * 4
    total += meta.n_vocab * 4 * inputs.parallel
    return int(total)


def _place(meta: ModelMetadata, inputs: PlanInputs) -> tuple[int, int, int, set[int]]:
    """(gpu weight bytes, cpu weight bytes, expert bytes kept on cpu, set of layers on the gpu)."""
    n_gpu = _gpu_layer_count(inputs.gpu_layers, meta.n_layer)
    first_gpu = max(meta.n_layer - n_gpu, 0)
    output_on_gpu = n_gpu > meta.n_layer
    cpu_patterns = _override_cpu_patterns(inputs.override_tensor)
    n_cpu_moe = inputs.n_cpu_moe or 0
    gpu = cpu = experts_cpu = 0
    for tensor in meta.tensors:
        layer = tensor.layer
        if tensor.name.startswith("token_embd"):
            on_gpu = False
        elif layer is None:
            on_gpu = output_on_gpu
        else:
            on_gpu = layer >= first_gpu
        moved = on_gpu and (
            (tensor.is_expert and layer is not None and layer < n_cpu_moe)
            or any(p.search(tensor.name) for p in cpu_patterns)
        )
        if moved:
            on_gpu = False
            if tensor.is_expert:
                experts_cpu += tensor.n_bytes
        if on_gpu:
            gpu += tensor.n_bytes
        else:
            cpu += tensor.n_bytes
    return gpu, cpu, experts_cpu, set(range(first_gpu, meta.n_layer))


def _estimate(meta: ModelMetadata, inputs: PlanInputs) -> Plan:
    if inputs.parallel < 1 or inputs.ctx_size < 1:
        raise ValueError("CTX_SIZE and PARALLEL must be positive")
    slot_cells = inputs.slot_cells
    kv_cells = slot_cells * inputs.parallel
    weights_gpu, weights_cpu, experts_cpu, gpu_layers = _place(meta, inputs)
    per_token = meta.kv_bytes_per_token(inputs.cache_type_k, inputs.cache_type_v)
    per_token_gpu = meta.kv_bytes_per_token(inputs.cache_type_k, inputs.cache_type_v, sorted(gpu_layers))
    recurrent_per_seq = meta.recurrent_bytes_per_sequence()
    recurrent_gpu_per_seq = meta.recurrent_bytes_per_sequence(sorted(gpu_layers))
    compute = _compute_bytes(meta, inputs, slot_cells) if gpu_layers else 0
    overhead = inputs.cuda_overhead_mib * MIB if gpu_layers else 0
    kv_gpu = int(per_token_gpu * kv_cells)
    recurrent_gpu = recurrent_gpu_per_seq * inputs.parallel
    gpu_total = weights_gpu + kv_gpu + recurrent_gpu + compute + overhead
    kv = int(per_token * kv_cells)
    recurrent = recurrent_per_seq * inputs.parallel
    host = (
        weights_cpu
        + (kv - kv_gpu)
        + (recurrent - recurrent_gpu)
        + (0 if gpu_layers else _compute_bytes(meta, inputs, slot_cells))
    )
    gpu_mem = int(inputs.gpu_mem_gib * GIB) if inputs.gpu_mem_gib is not None else None
    margin = inputs.margin_mib * MIB
    fits = None if gpu_mem is None else gpu_total + margin <= gpu_mem
    return Plan(
        model=meta.name or Path(meta.path or "model").name,
        architecture=meta.architecture,
        n_layer=meta.n_layer,
        attention_layers=len(meta.attention_layers),
        recurrent_layers=len(meta.recurrent_layers),
        n_expert=meta.n_expert,
        inputs=inputs,
        slot_cells=slot_cells,
        kv_cells=kv_cells,
        kv_bytes_per_token=per_token,
        weights_total_bytes=meta.weights_bytes,
        weights_gpu_bytes=weights_gpu,
        weights_cpu_bytes=weights_cpu,
        experts_cpu_bytes=experts_cpu,
        kv_bytes=kv,
        kv_gpu_bytes=kv_gpu,
        recurrent_bytes_per_seq=recurrent_per_seq,
        recurrent_bytes=recurrent,
        recurrent_gpu_bytes=recurrent_gpu,
        compute_bytes=compute,
        overhead_bytes=overhead,
        gpu_total_bytes=gpu_total,
        host_bytes=host,
        gpu_mem_bytes=gpu_mem,
        margin_bytes=margin,
        fits=fits,
    )


def _fmt(n_bytes: float) -> str:
    if abs(n_bytes) >= GIB:
        return f"{n_bytes / GIB:.2f} GiB"
    if abs(n_bytes) >= MIB or n_bytes == 0:
        return f"{n_bytes / MIB:.1f} MiB"
    return f"{n_bytes / 1024:.2f} KiB"


def _suggestions(meta: ModelMetadata, plan: Plan) -> list[str]:
    """What to change when the plan does not fit, each with the number that makes it fit (if one does)."""
    inputs = plan.inputs
    deficit = -(plan.headroom_bytes or 0)
    out = []
    if meta.is_moe and not inputs.override_tensor:
        current = inputs.n_cpu_moe or 0
        for n in range(current + 1, meta.n_layer + 1):
            if _estimate(meta, replace(inputs, n_cpu_moe=n)).fits:
                trial = _estimate(meta, replace(inputs, n_cpu_moe=n))
                out.append(
                    f"raise N_CPU_MOE to {n}: keeps {_fmt(trial.experts_cpu_bytes)} of experts in host RAM "
                    "(a 3B-active MoE loses little speed)"
                )
                break
        else:
            out.append(
                "even N_CPU_MOE = all layers does not fit: lower CTX_SIZE/PARALLEL or use a smaller quantization"
            )
    if inputs.parallel > 1 and plan.recurrent_gpu_bytes > 0:
        saved = plan.recurrent_gpu_bytes // inputs.parallel
        out.append(
            f"lower PARALLEL ({inputs.parallel} -> {inputs.parallel - 1}) saves only {_fmt(saved)} here "
            "(one slot's recurrent state; the KV cache depends on CTX_SIZE, not on PARALLEL)"
        )
    if plan.kv_gpu_bytes > 0:
        per_token = plan.kv_bytes_per_token
        if per_token > 0:
            shrink = math.ceil(deficit / per_token / KV_CELL_PADDING) * KV_CELL_PADDING
            target = inputs.ctx_size - shrink
            if target >= 512 * inputs.parallel:
                out.append(
                    f"lower CTX_SIZE to {target} (KV cache {_fmt(per_token)} per token, about {_fmt(per_token * shrink)} saved)"
                )
            else:
                out.append(
                    f"CTX_SIZE alone cannot close a {_fmt(deficit)} gap: the whole KV cache is {_fmt(plan.kv_gpu_bytes)}"
                )
    if inputs.cache_type_k == "f16" and inputs.cache_type_v == "f16" and plan.kv_gpu_bytes > 0:
        quant = _estimate(meta, replace(inputs, cache_type_k="q8_0", cache_type_v="q8_0"))
        out.append(
            f"CACHE_TYPE_K/V=q8_0 saves {_fmt(plan.kv_gpu_bytes - quant.kv_gpu_bytes)} (needs FLASH_ATTENTION=true for V)"
        )
    if str(inputs.gpu_layers) in ("auto", "all"):
        out.append(
            "GPU_LAYERS=auto lets llama.cpp drop whole layers to the CPU when short; N_CPU_MOE is usually faster"
        )
    return out


def _notes(meta: ModelMetadata, plan: Plan) -> list[str]:
    inputs = plan.inputs
    notes = []
    if meta.is_hybrid:
        dense_equiv = (
            meta.n_head_kv[meta.attention_layers[0]] * (meta.key_length + meta.value_length) * 2 * meta.n_layer
        )
        notes.append(
            f"hybrid model: KV cache in {plan.attention_layers} of {plan.n_layer} layers "
            f"({_fmt(plan.kv_bytes_per_token)}/token at {inputs.cache_type_k}/{inputs.cache_type_v}; a dense model of this shape "
            f"would need {_fmt(dense_equiv)}/token at f16); {plan.recurrent_layers} Mamba layers hold "
            f"{_fmt(plan.recurrent_bytes_per_seq)} of f32 state per slot, which cache types do not shrink"
        )
        quant = _estimate(meta, replace(inputs, cache_type_k="q8_0", cache_type_v="q8_0"))
        notes.append(
            f"KV quantization (q8_0) would save {_fmt(plan.kv_bytes - quant.kv_bytes)} in total at this CTX_SIZE"
        )
        notes.append(
            "host RAM also holds context checkpoints for hybrid models (each one a copy of a slot's recurrent "
            f"state, {_fmt(plan.recurrent_bytes_per_seq)}; up to --ctx-checkpoints per slot) and the prompt cache (--cache-ram)"
        )
    if meta.n_ctx_train and plan.slot_cells > meta.n_ctx_train:
        notes.append(
            f"each slot gets {plan.slot_cells} tokens, more than the model was trained on ({meta.n_ctx_train})"
        )
    if plan.slot_cells * inputs.parallel != inputs.ctx_size:
        notes.append(
            f"llama.cpp pads each slot to {plan.slot_cells} tokens (CTX_SIZE {inputs.ctx_size} / PARALLEL {inputs.parallel})"
        )
    if str(inputs.gpu_layers) == "auto":
        notes.append(
            "GPU_LAYERS=auto: this plan assumes every layer fits; llama.cpp --fit moves layers off the GPU if not"
        )
    return notes


def plan_from_metadata(meta: ModelMetadata, inputs: PlanInputs) -> Plan:
    """Estimate GPU and host memory for `inputs` on the model described by `meta` (pure: no I/O)."""
    plan = _estimate(meta, inputs)
    suggestions = tuple(_suggestions(meta, plan)) if plan.fits is False else ()
    return replace(plan, suggestions=suggestions, notes=tuple(_notes(meta, plan)))


def format_plan(plan: Plan) -> str:
    """The plan as the text `hsi plan` prints."""
    i = plan.inputs
    moe = f", {plan.n_expert} experts" if plan.n_expert else ""
    lines = [
        f"model: {plan.model} ({plan.architecture}): {plan.n_layer} layers, {plan.attention_layers} with attention, "
        f"{plan.recurrent_layers} recurrent{moe}",
        f"settings: CTX_SIZE={i.ctx_size} PARALLEL={i.parallel} (slot {plan.slot_cells} tokens) "
        f"CACHE_TYPE_K={i.cache_type_k} CACHE_TYPE_V={i.cache_type_v} GPU_LAYERS={i.gpu_layers} "
        f"N_CPU_MOE={i.n_cpu_moe if i.n_cpu_moe is not None else '-'} FLASH_ATTENTION={str(i.flash_attention).lower()}",
        "GPU memory (estimate):",
        f"  weights            {_fmt(plan.weights_gpu_bytes):>11}  (of {_fmt(plan.weights_total_bytes)}; {_fmt(plan.experts_cpu_bytes)} of experts on the CPU)",
        f"  KV cache           {_fmt(plan.kv_gpu_bytes):>11}  ({plan.kv_bytes_per_token / 1024:.2f} KiB/token x {plan.kv_cells} cells)",
        f"  recurrent state    {_fmt(plan.recurrent_gpu_bytes):>11}  ({_fmt(plan.recurrent_bytes_per_seq)}/slot x {i.parallel}, f32)",
        f"  compute buffers   ~{_fmt(plan.compute_bytes):>11}  (rough)",
        f"  CUDA overhead     ~{_fmt(plan.overhead_bytes):>11}",
        f"  total              {_fmt(plan.gpu_total_bytes):>11}",
        f"host RAM for weights/state kept on the CPU: {_fmt(plan.host_bytes)}",
    ]
    if plan.gpu_mem_bytes is None:
        lines.append("fit: pass --gpu-mem-gib to judge the fit")
    else:
        verdict = "fits" if plan.fits else "DOES NOT FIT"
        lines.append(
            f"fit: {verdict} in {_fmt(plan.gpu_mem_bytes)} with llama.cpp's {_fmt(plan.margin_bytes)} margin "
            f"(headroom {_fmt(plan.headroom_bytes or 0)})"
        )
    if plan.suggestions:
        lines.append("what to change:")
        lines += [f"  - {s}" for s in plan.suggestions]
    if plan.notes:
        lines.append("notes:")
        lines += [f"  - {n}" for n in plan.notes]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------------


def add_plan_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Arguments of `hsi plan`; settings not given here come from .env / the environment."""
    parser.add_argument("--model", default=None, help="GGUF file (default: MODEL_PATH, else the bundled SmolLM2)")
    parser.add_argument("--gpu-mem-gib", type=float, default=None, help="GPU memory to plan for, GiB (e.g. 24)")
    parser.add_argument("--env-file", default=None, help="settings file (default: HSI_ENV_FILE or .env)")
    parser.add_argument("--ctx-size", type=int, default=None, help="override CTX_SIZE")
    parser.add_argument("--parallel", type=int, default=None, help="override PARALLEL")
    parser.add_argument("--n-cpu-moe", type=int, default=None, help="override N_CPU_MOE")
    parser.add_argument("--cache-type-k", default=None, help="override CACHE_TYPE_K")
    parser.add_argument("--cache-type-v", default=None, help="override CACHE_TYPE_V")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    return parser


def run_plan(args: argparse.Namespace) -> int:
    """0: fits (or no GPU size given); 1: does not fit; 2: bad settings or model file."""
    from hsi_dagster.settings import SettingsError, load_settings

    overrides = {
        name: value
        for name, value in (
            ("CTX_SIZE", args.ctx_size),
            ("PARALLEL", args.parallel),
            ("N_CPU_MOE", args.n_cpu_moe),
            ("CACHE_TYPE_K", args.cache_type_k),
            ("CACHE_TYPE_V", args.cache_type_v),
        )
        if value is not None
    }
    try:
        settings = load_settings(args.env_file, **overrides)
        model = Path(args.model) if args.model else settings.model_file
        meta = read_metadata(model)
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"error: MODEL_PATH: cannot read the GGUF header: {exc}", file=sys.stderr)
        return 2
    if args.gpu_mem_gib is not None and args.gpu_mem_gib <= 0:
        print("error: --gpu-mem-gib must be positive", file=sys.stderr)
        return 2
    plan = plan_from_metadata(meta, PlanInputs.from_settings(settings, gpu_mem_gib=args.gpu_mem_gib))
    print(json.dumps(plan.to_dict(), indent=2, default=str) if args.json else format_plan(plan))
    return 1 if plan.fits is False else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = add_plan_arguments(argparse.ArgumentParser(prog="hsi plan", description=__doc__.splitlines()[0]))
    return run_plan(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
