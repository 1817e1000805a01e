"""Reading a GGUF file's header: the model's shape per layer and the size of every tensor, never the tensor data.

Why a sequential reader of our own: the planner and the config check need only the key/values and tensor infos at
the front of the file; `gguf.GGUFReader` parses every field into numpy structures first (SmolLM2-135M, 98 MB:
~1.8 s there vs ~50 ms here on the 2-core test machine). Key names and type codes come from the `gguf` package,
so they follow llama.cpp; tests/llm/test_gguf.py checks this reader against `gguf.GGUFReader` on real files.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import gguf

# Expert tensors as llama.cpp's --n-cpu-moe names them: blk.N.ffn_{up,down,gate,gate_up}_{,ch}exps.*
EXPERT_TENSOR = re.compile(r"^blk\.(\d+)\.ffn_(up|down|gate|gate_up)_(ch)?exps\b")
LAYER_TENSOR = re.compile(r"^blk\.(\d+)\.")
PURE_RECURRENT_ARCHS = ("mamba", "mamba2")


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
