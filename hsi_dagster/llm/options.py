"""The one mapping from settings to llama-server options.

The production entrypoint (`hsi_dagster.llm.argv`, called by `ai/nemotron/`) renders these as command-line
flags; the embedded server (`hsi llm serve`) renders the same values as xllamacpp CommonParams.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hsi_dagster.settings import HsiSettings


@dataclass(frozen=True)
class LlamaServerOptions:
    model_path: Path
    host: str
    port: int
    ctx_size: int
    parallel: int
    gpu_layers: str  # "auto", "all" or a number
    flash_attention: bool
    cache_type_k: str
    cache_type_v: str
    cache_reuse: int
    threads: int | None
    batch_size: int
    api_key: str | None
    mlock: bool
    n_cpu_moe: int | None
    override_tensor: str | None
    draft_model_path: str | None
    metrics: bool = True
    slots: bool = True
    cont_batching: bool = True
    alias: str | None = None  # MODEL_ALIAS; None = the GGUF's base name (see `served_name`)

    @classmethod
    def from_settings(
        cls, settings: HsiSettings, *, model_path: Path | None = None, host: str | None = None
    ) -> LlamaServerOptions:
        return cls(
            model_path=model_path or settings.model_file,
            host=host or settings.LLM_HOST,
            port=settings.LLM_PORT,
            ctx_size=settings.CTX_SIZE,
            parallel=settings.PARALLEL,
            gpu_layers=settings.GPU_LAYERS,
            flash_attention=settings.FLASH_ATTENTION,
            cache_type_k=settings.CACHE_TYPE_K,
            cache_type_v=settings.CACHE_TYPE_V,
            cache_reuse=settings.CACHE_REUSE,
            threads=settings.THREADS,
            batch_size=settings.BATCH_SIZE,
            api_key=settings.api_key,
            mlock=settings.MLOCK,
            n_cpu_moe=settings.N_CPU_MOE,
            override_tensor=settings.OVERRIDE_TENSOR,
            draft_model_path=settings.DRAFT_MODEL_PATH,
            alias=settings.MODEL_ALIAS,
        )

    @property
    def slot_context(self) -> int:
        return self.ctx_size // self.parallel

    @property
    def served_name(self) -> str:
        """The name the server reports as its model (`--alias`): rows, metadata and metrics carry it, not a path."""
        return self.alias or short_model_name(str(self.model_path))


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
