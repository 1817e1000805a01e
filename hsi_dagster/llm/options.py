"""Each llama-server setting, parsed once into typed options that every consumer shares.

`LlamaServerOptions.from_settings` is the one mapping from settings to llama-server options: the production
entrypoint (`llm/argv.py`, called by `ai/nemotron/`) renders them as command-line flags, the embedded server
(`llm/embedded.py`, `hsi llm serve`) as xllamacpp CommonParams, and the capacity planner can read the same
values. GPU_LAYERS arrives parsed (`settings.GpuLayers`); OVERRIDE_TENSOR is parsed here into `TensorOverride`
entries. `problems()` is the one place that decides which values, alone or together, llama-server would refuse,
so every consumer refuses the same things with the same message naming the variable.

Importable with pydantic + pydantic-settings only: the llama-server image carries nothing else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path

from hsi_dagster.core.prompt.slot_budget import slot_context
from hsi_dagster.llm import model_files
from hsi_dagster.settings import KV_CACHE_TYPES, GpuLayers, HsiSettings, SettingsError

# Cache types llama.cpp can only use for V with flash attention ("quantized V cache requires flash_attn").
FLOAT_CACHE_TYPES = ("f32", "f16", "bf16")


class OptionError(SettingsError):
    """A llama-server option that cannot work; `variable` is the setting to change, `detail` says why."""

    def __init__(self, variable: str, detail: str) -> None:
        super().__init__(f"{variable}: {detail}")
        self.variable = variable
        self.detail = detail


@dataclass(frozen=True)
class TensorOverride:
    """One `PATTERN=BUFFER` entry of OVERRIDE_TENSOR: tensors whose name matches `pattern` (searched, as llama.cpp
    does) are placed in `buffer` (CPU, CUDA0, ...)."""

    pattern: str
    buffer: str

    def __str__(self) -> str:
        return f"{self.pattern}={self.buffer}"

    @property
    def on_cpu(self) -> bool:
        return self.buffer.strip().upper().startswith("CPU")

    def matches(self, tensor_name: str) -> bool:
        return re.search(self.pattern, tensor_name) is not None


def parse_override_tensor(value: str) -> tuple[TensorOverride, ...]:
    """Split `PATTERN=BUFFER[,PATTERN=BUFFER...]` as llama.cpp does; OptionError names OVERRIDE_TENSOR otherwise."""
    entries = []
    for raw in value.split(","):
        pattern, sep, buffer = raw.strip().partition("=")
        if not sep or not pattern or not buffer:
            raise OptionError(
                "OVERRIDE_TENSOR",
                f"{value!r} is invalid: each entry must read <tensor name regex>=<buffer type>, e.g. 'exps=CPU'",
            )
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError("OVERRIDE_TENSOR", f"{pattern!r} is not a valid regular expression ({exc})") from None
        entries.append(TensorOverride(pattern, buffer))
    return tuple(entries)


def _is_gpu_layers(value: object) -> bool:
    return value in ("auto", "all") or (isinstance(value, int) and not isinstance(value, bool) and value >= 0)


@dataclass(frozen=True)
class LlamaServerOptions:
    model_path: Path
    host: str
    port: int
    ctx_size: int
    parallel: int
    gpu_layers: GpuLayers
    flash_attention: bool
    cache_type_k: str
    cache_type_v: str
    cache_reuse: int
    cache_ram_mib: int
    threads: int | None
    priority: int  # PRIO: -1 low .. 3 realtime (llama.cpp's ggml_sched_priority)
    batch_size: int
    api_key: str | None
    mlock: bool
    n_cpu_moe: int | None
    override_tensor: tuple[TensorOverride, ...]
    draft_model_path: str | None
    metrics: bool = True
    slots: bool = True
    cont_batching: bool = True
    alias: str | None = None  # MODEL_ALIAS; None = the GGUF's base name (see `served_name`)

    @classmethod
    def from_settings(
        cls,
        settings: HsiSettings,
        *,
        model_path: Path | None = None,
        host: str | None = None,
        override_tensor: tuple[TensorOverride, ...] | None = None,
    ) -> LlamaServerOptions:
        """The options `settings` give; OptionError names OVERRIDE_TENSOR when it does not parse (pass
        `override_tensor` to set the placement instead of parsing it)."""
        if override_tensor is None:
            override_tensor = parse_override_tensor(settings.OVERRIDE_TENSOR) if settings.OVERRIDE_TENSOR else ()
        # CTX_SIZE -> ctx_size, ...: an option named like a setting is that setting, as HsiSettings parsed it
        values = {
            option.name: getattr(settings, option.name.upper())
            for option in fields(cls)
            if option.name.upper() in HsiSettings.model_fields
        }
        values.update(
            model_path=model_path or model_files.model_path(settings.MODEL_PATH),
            override_tensor=override_tensor,
            host=host or settings.LLM_HOST,
            port=settings.LLM_PORT,
            priority=settings.PRIO,
            api_key=settings.api_key,
            alias=settings.MODEL_ALIAS,
        )
        return cls(**values)

    @property
    def slot_context(self) -> int:
        return slot_context(self.ctx_size, self.parallel)

    @property
    def served_name(self) -> str:
        """The name the server reports as its model (`--alias`): rows, metadata and metrics carry it, not a path."""
        return self.alias or short_model_name(str(self.model_path))

    @property
    def override_tensor_text(self) -> str | None:
        """OVERRIDE_TENSOR as llama.cpp reads it (`--override-tensor`, xllamacpp tensor_buft_overrides)."""
        return ",".join(str(entry) for entry in self.override_tensor) or None

    def problems(self) -> list[OptionError]:
        """Every value llama-server would refuse or misread, alone or in combination, each naming the variable.

        The checks of single values repeat what HsiSettings validates, for options built by hand; the
        combinations are decided here only (the argv builder and the embedded server both call this).
        """
        found: list[OptionError] = []

        def bad(variable: str, detail: str) -> None:
            found.append(OptionError(variable, detail))

        if not str(self.model_path).strip():
            bad("MODEL_PATH", "empty value")
        if not self.host or any(ch.isspace() for ch in self.host):
            bad("LLM_HOST", f"{self.host!r} is not a host address")
        if not 1 <= self.port <= 65535:
            bad("LLM_PORT", f"{self.port} is outside 1-65535")
        if self.parallel < 1:
            bad("PARALLEL", f"{self.parallel} must be at least 1")
        elif self.ctx_size < self.parallel:
            bad("CTX_SIZE", f"{self.ctx_size} leaves no context for each of the {self.parallel} slots")
        if not _is_gpu_layers(self.gpu_layers):
            bad("GPU_LAYERS", f"{self.gpu_layers!r} is invalid: accepted values are auto, all, or a whole number")
        for variable, value in (("CACHE_TYPE_K", self.cache_type_k), ("CACHE_TYPE_V", self.cache_type_v)):
            if value not in KV_CACHE_TYPES:
                bad(variable, f"{value!r} is invalid: accepted values are {', '.join(KV_CACHE_TYPES)}")
        quantized_v = self.cache_type_v in KV_CACHE_TYPES and self.cache_type_v not in FLOAT_CACHE_TYPES
        if quantized_v and not self.flash_attention:
            bad(
                "CACHE_TYPE_V",
                f"{self.cache_type_v} needs FLASH_ATTENTION=true (llama.cpp refuses a quantized V cache without it)",
            )
        minima: tuple[tuple[str, int | None, int], ...] = (
            ("CACHE_REUSE", self.cache_reuse, 0),
            ("CACHE_RAM_MIB", self.cache_ram_mib, -1),
            ("BATCH_SIZE", self.batch_size, 1),
            ("THREADS", self.threads, 1),
            ("N_CPU_MOE", self.n_cpu_moe, 0),
        )
        for name, number, minimum in minima:
            if number is not None and number < minimum:
                bad(name, f"{number} must be at least {minimum}")
        if self.override_tensor and self.n_cpu_moe is not None:
            bad("N_CPU_MOE", "set together with OVERRIDE_TENSOR; both place MoE expert tensors, set only one of them")
        return found

    def check(self) -> None:
        """Raise the first of `problems()`."""
        found = self.problems()
        if found:
            raise found[0]


def short_model_name(name: str) -> str:
    """A model's short name: the base name of a file path without `.gguf`; any other name (an alias, a Hugging
    Face id such as `nvidia/model`) unchanged.

    Servers started without `--alias` report the model file's full path (inside a virtual environment or a
    container); this keeps such a path out of rows, metadata and metric labels.
    """
    name = name.strip()
    if name.lower().endswith(".gguf") or name.startswith(("/", "./", "../", "~")) or "\\" in name:
        base = name.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
        return base[: -len(".gguf")] if base.lower().endswith(".gguf") else base
    return name
