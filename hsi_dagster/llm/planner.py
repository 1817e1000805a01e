"""Will these settings fit on this GPU? A memory estimate from the GGUF header alone (`hsi plan` prints it).

Why it exists: the seed design sized VRAM as if Nemotron-3-Nano were a dense transformer (KV cache in every
layer). It is a hybrid: only the attention layers hold a KV cache (6 of 52), every Mamba-2 layer holds a
fixed-size recurrent state per sequence in f32, and most of the weights are MoE experts that can stay in host
RAM (N_CPU_MOE). This planner counts each part from the model's own metadata.

What it counts, and how well:
- weights: exact tensor sizes from the tensor infos (no tensor data is read). Placement follows llama.cpp:
  token embeddings stay on the CPU; with GPU_LAYERS=N the last N layers go to the GPU (more than the layer
  count also moves the output layer); N_CPU_MOE=K keeps the `ffn_*_exps` tensors of layers 0..K-1 on the CPU;
  OVERRIDE_TENSOR entries with a CPU buffer keep the tensors they match (`re.search`, as llama.cpp) on the CPU.
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

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import gguf

from hsi_dagster.llm.gguf import ModelMetadata
from hsi_dagster.llm.options import LlamaServerOptions, TensorOverride
from hsi_dagster.settings import GpuLayers

MIB = 1024**2
GIB = 1024**3

# llama.cpp pads each sequence's KV cells to a multiple of this (measured: 4096/3 slots -> 1536 cells each).
KV_CELL_PADDING = 256
DEFAULT_UBATCH = 512  # llama-server --ubatch-size default; the project does not change it
DEFAULT_MARGIN_MIB = 1024  # llama.cpp --fit-target default: free memory it leaves on each device
DEFAULT_CUDA_OVERHEAD_MIB = 400  # CUDA context + cuBLAS workspace, not in llama.cpp's buffer sizes
RECURRENT_STATE_BYTES = 4  # Mamba conv/SSM state is always f32

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


def kv_bytes_per_token(
    meta: ModelMetadata, cache_type_k: str = "f16", cache_type_v: str = "f16", layers: Sequence[int] | None = None
) -> float:
    """K + V bytes one token occupies across `layers` (default: every attention layer)."""
    attention = set(meta.attention_layers)
    chosen = meta.attention_layers if layers is None else [il for il in layers if il in attention]
    k_per_elem, v_per_elem = bytes_per_element(cache_type_k), bytes_per_element(cache_type_v)
    return sum(meta.n_head_kv[il] * (meta.key_length * k_per_elem + meta.value_length * v_per_elem) for il in chosen)


def recurrent_values_per_layer(meta: ModelMetadata) -> int:
    """f32 values of one sequence's state in one Mamba layer: conv window + SSM state (n_embd_r + n_embd_s)."""
    conv = max(meta.ssm_d_conv - 1, 0) * (meta.ssm_d_inner + 2 * meta.ssm_n_group * meta.ssm_d_state)
    return conv + meta.ssm_d_state * meta.ssm_d_inner


def recurrent_bytes_per_sequence(meta: ModelMetadata, layers: Sequence[int] | None = None) -> int:
    """Bytes of one sequence's (slot's) Mamba state across `layers` (default: every recurrent layer)."""
    recurrent = set(meta.recurrent_layers)
    chosen = meta.recurrent_layers if layers is None else [il for il in layers if il in recurrent]
    return len(chosen) * recurrent_values_per_layer(meta) * RECURRENT_STATE_BYTES


@dataclass(frozen=True)
class PlanInputs:
    """The settings the plan depends on (names mirror the .env variables)."""

    ctx_size: int = 32768
    parallel: int = 2
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    gpu_layers: GpuLayers = "auto"
    n_cpu_moe: int | None = None
    override_tensor: tuple[TensorOverride, ...] = ()
    flash_attention: bool = True
    batch_size: int = 2048
    gpu_mem_gib: float | None = None
    ubatch_size: int = DEFAULT_UBATCH
    margin_mib: int = DEFAULT_MARGIN_MIB
    cuda_overhead_mib: int = DEFAULT_CUDA_OVERHEAD_MIB

    @classmethod
    def from_options(cls, options: LlamaServerOptions, *, gpu_mem_gib: float | None = None) -> PlanInputs:
        """From the parsed server options, so the plan and the server read every llama setting the same way: each
        input the options also hold is copied (the plan's own margins keep their defaults)."""
        held = {option.name for option in fields(options)}
        shared = {field.name: getattr(options, field.name) for field in fields(cls) if field.name in held}
        return cls(**shared, gpu_mem_gib=gpu_mem_gib)

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
        data["inputs"]["override_tensor"] = ",".join(map(str, self.inputs.override_tensor)) or None  # as in .env
        data["headroom_bytes"] = self.headroom_bytes
        return data


def _gpu_layer_count(gpu_layers: GpuLayers, n_layer: int) -> int:
    """Layers on the GPU, counting the output layer as one more (auto and all offload everything)."""
    return n_layer + 1 if gpu_layers in ("auto", "all") else int(gpu_layers)


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
    cpu_overrides = [entry for entry in inputs.override_tensor if entry.on_cpu]
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
            or any(entry.matches(tensor.name) for entry in cpu_overrides)
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
    per_token = kv_bytes_per_token(meta, inputs.cache_type_k, inputs.cache_type_v)
    per_token_gpu = kv_bytes_per_token(meta, inputs.cache_type_k, inputs.cache_type_v, sorted(gpu_layers))
    recurrent_per_seq = recurrent_bytes_per_sequence(meta)
    recurrent_gpu_per_seq = recurrent_bytes_per_sequence(meta, sorted(gpu_layers))
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


def format_bytes(n_bytes: float) -> str:
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
                    f"raise N_CPU_MOE to {n}: keeps {format_bytes(trial.experts_cpu_bytes)} of experts in host RAM "
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
            f"lower PARALLEL ({inputs.parallel} -> {inputs.parallel - 1}) saves only {format_bytes(saved)} here "
            "(one slot's recurrent state; the KV cache depends on CTX_SIZE, not on PARALLEL)"
        )
    if plan.kv_gpu_bytes > 0:
        per_token = plan.kv_bytes_per_token
        if per_token > 0:
            shrink = math.ceil(deficit / per_token / KV_CELL_PADDING) * KV_CELL_PADDING
            target = inputs.ctx_size - shrink
            if target >= 512 * inputs.parallel:
                out.append(
                    f"lower CTX_SIZE to {target} (KV cache {format_bytes(per_token)} per token, "
                    f"about {format_bytes(per_token * shrink)} saved)"
                )
            else:
                out.append(
                    f"CTX_SIZE alone cannot close a {format_bytes(deficit)} gap: "
                    f"the whole KV cache is {format_bytes(plan.kv_gpu_bytes)}"
                )
    if inputs.cache_type_k == "f16" and inputs.cache_type_v == "f16" and plan.kv_gpu_bytes > 0:
        quant = _estimate(meta, replace(inputs, cache_type_k="q8_0", cache_type_v="q8_0"))
        out.append(
            f"CACHE_TYPE_K/V=q8_0 saves {format_bytes(plan.kv_gpu_bytes - quant.kv_gpu_bytes)} "
            "(needs FLASH_ATTENTION=true for V)"
        )
    if inputs.gpu_layers in ("auto", "all"):
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
            f"({format_bytes(plan.kv_bytes_per_token)}/token at {inputs.cache_type_k}/{inputs.cache_type_v}; "
            "a dense model of this shape "
            f"would need {format_bytes(dense_equiv)}/token at f16); {plan.recurrent_layers} Mamba layers hold "
            f"{format_bytes(plan.recurrent_bytes_per_seq)} of f32 state per slot, which cache types do not shrink"
        )
        quant = _estimate(meta, replace(inputs, cache_type_k="q8_0", cache_type_v="q8_0"))
        notes.append(
            f"KV quantization (q8_0) would save {format_bytes(plan.kv_bytes - quant.kv_bytes)} in total "
            "at this CTX_SIZE"
        )
        notes.append(
            "host RAM also holds context checkpoints for hybrid models (each one a copy of a slot's recurrent "
            f"state, {format_bytes(plan.recurrent_bytes_per_seq)}; up to --ctx-checkpoints per slot) "
            "and the prompt cache (--cache-ram)"
        )
    if meta.n_ctx_train and plan.slot_cells > meta.n_ctx_train:
        notes.append(
            f"each slot gets {plan.slot_cells} tokens, more than the model was trained on ({meta.n_ctx_train})"
        )
    if plan.slot_cells * inputs.parallel != inputs.ctx_size:
        notes.append(
            f"llama.cpp pads each slot to {plan.slot_cells} tokens "
            f"(CTX_SIZE {inputs.ctx_size} / PARALLEL {inputs.parallel})"
        )
    if inputs.gpu_layers == "auto":
        notes.append(
            "GPU_LAYERS=auto: this plan assumes every layer fits; llama.cpp --fit moves layers off the GPU if not"
        )
    return notes


def plan_from_metadata(meta: ModelMetadata, inputs: PlanInputs) -> Plan:
    """Estimate GPU and host memory for `inputs` on the model described by `meta` (pure: no I/O)."""
    plan = _estimate(meta, inputs)
    suggestions = tuple(_suggestions(meta, plan)) if plan.fits is False else ()
    return replace(plan, suggestions=suggestions, notes=tuple(_notes(meta, plan)))
