"""Settings that are each valid but do not work together, found before a deployment (`hsi config check`).

Every finding names the .env variable to change. Errors are combinations llama-server refuses or that break
the pipeline (a prompt that cannot fit a slot); warnings cost throughput, memory or accuracy; info explains.
With the model's GGUF header (`model_meta`) the checks that depend on the architecture (hybrid, MoE) are exact;
without it they fall back to what is true for the production model and say so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from hsi_dagster.llm.gguf import ModelMetadata
from hsi_dagster.llm.options import FLOAT_CACHE_TYPES, LlamaServerOptions, OptionError
from hsi_dagster.llm.planner import MIB, PlanInputs, plan_from_metadata
from hsi_dagster.settings import MIN_PROMPT_TOKENS, HsiSettings

Level = Literal["error", "warning", "info"]
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class Finding:
    level: Level
    variable: str
    message: str

    def __str__(self) -> str:
        return f"{self.level.upper():7} {self.variable}: {self.message}"


def _refused(settings: HsiSettings) -> list[Finding]:
    """Values llama-server would refuse, alone or together: `LlamaServerOptions.problems` decides (the argv builder
    and the embedded server refuse the same ones), reported here as errors instead of failing at start-up."""
    try:
        options = LlamaServerOptions.from_settings(settings)
    except OptionError as exc:  # OVERRIDE_TENSOR does not parse
        return [Finding("error", exc.variable, exc.detail)]
    return [Finding("error", problem.variable, problem.detail) for problem in options.problems()]


def _slot_budget(settings: HsiSettings, meta: ModelMetadata | None) -> list[Finding]:
    slot = settings.slot_context
    budget = settings.fallback_prompt_budget
    detail = (
        f"each slot holds CTX_SIZE / PARALLEL = {settings.CTX_SIZE} / {settings.PARALLEL} = {slot} tokens; minus "
        f"NEMOTRON_MAX_OUTPUT_TOKENS {settings.NEMOTRON_MAX_OUTPUT_TOKENS} and PROMPT_SAFETY_MARGIN_TOKENS "
        f"{settings.PROMPT_SAFETY_MARGIN_TOKENS} leaves {budget} prompt tokens"
    )
    findings = []
    if budget < MIN_PROMPT_TOKENS:
        findings.append(
            Finding(
                "error",
                "CTX_SIZE",
                f"{detail}, less than the minimal prompt ({MIN_PROMPT_TOKENS}); raise CTX_SIZE or lower PARALLEL",
            )
        )
    elif budget < 2 * MIN_PROMPT_TOKENS:
        findings.append(Finding("warning", "CTX_SIZE", f"{detail}; enrichment sections will often be dropped"))
    if meta is not None and meta.n_ctx_train and slot > meta.n_ctx_train:
        findings.append(
            Finding(
                "warning",
                "CTX_SIZE",
                f"{slot} tokens per slot exceed the model's training context ({meta.n_ctx_train})",
            )
        )
    return findings


def _cache_types(settings: HsiSettings, meta: ModelMetadata | None) -> list[Finding]:
    """What KV-cache quantization buys on this model (a quantized V without flash attention: see _refused)."""
    findings: list[Finding] = []
    quantized = settings.CACHE_TYPE_V not in FLOAT_CACHE_TYPES or settings.CACHE_TYPE_K not in FLOAT_CACHE_TYPES
    if not quantized:
        return findings
    variable = "CACHE_TYPE_K" if settings.CACHE_TYPE_K not in FLOAT_CACHE_TYPES else "CACHE_TYPE_V"
    if meta is None:
        findings.append(
            Finding(
                "info",
                variable,
                "KV-cache quantization saves little on hybrid models such as Nemotron-3-Nano (KV cache in 6 of 52 "
                "layers, ~6 KiB/token at f16); run `hsi plan` to see the figure for this model",
            )
        )
    elif meta.recurrent_layers:
        # Tensor placement has no effect on the totals, and a bad OVERRIDE_TENSOR is _refused's finding.
        inputs = PlanInputs.from_options(LlamaServerOptions.from_settings(settings, override_tensor=()))
        quant = plan_from_metadata(meta, inputs)
        full = plan_from_metadata(meta, replace(inputs, cache_type_k="f16", cache_type_v="f16"))
        saved = full.kv_bytes - quant.kv_bytes
        findings.append(
            Finding(
                "warning",
                variable,
                f"{settings.CACHE_TYPE_K}/{settings.CACHE_TYPE_V} saves only {saved / MIB:.0f} MiB on this hybrid "
                f"model (KV cache in {len(meta.attention_layers)} of {meta.n_layer} layers; the "
                f"{quant.recurrent_bytes / MIB:.0f} MiB of f32 recurrent state is not quantized) and costs "
                "accuracy and speed; prefer f16",
            )
        )
    return findings


def _draft(settings: HsiSettings, meta: ModelMetadata | None) -> list[Finding]:
    if not settings.DRAFT_MODEL_PATH:
        return []
    if meta is None:
        return [
            Finding(
                "warning",
                "DRAFT_MODEL_PATH",
                "speculative decoding is refused for hybrid/recurrent models such as Nemotron-3-Nano "
                "('not supported by this context'); unset it unless the model is a plain transformer",
            )
        ]
    if meta.recurrent_layers:
        return [
            Finding(
                "error",
                "DRAFT_MODEL_PATH",
                f"{meta.architecture} has {len(meta.recurrent_layers)} recurrent layers: llama.cpp refuses speculative "
                "decoding for hybrid/recurrent models; unset DRAFT_MODEL_PATH",
            )
        ]
    return [Finding("info", "DRAFT_MODEL_PATH", "the draft model must share the target model's vocabulary")]


def _moe(settings: HsiSettings, meta: ModelMetadata | None) -> list[Finding]:
    """N_CPU_MOE against the model (N_CPU_MOE together with OVERRIDE_TENSOR: see _refused)."""
    findings = []
    if settings.N_CPU_MOE and meta is not None:
        if not meta.is_moe:
            findings.append(
                Finding("warning", "N_CPU_MOE", f"{meta.architecture} has no MoE experts: N_CPU_MOE does nothing")
            )
        elif meta.n_layer < settings.N_CPU_MOE:
            findings.append(
                Finding(
                    "info",
                    "N_CPU_MOE",
                    f"{settings.N_CPU_MOE} exceeds the {meta.n_layer} layers: every expert is on the CPU",
                )
            )
    return findings


def _misc(settings: HsiSettings, meta: ModelMetadata | None) -> list[Finding]:
    findings = []
    if meta is not None and meta.recurrent_layers and settings.CACHE_REUSE > 0:
        findings.append(
            Finding(
                "info",
                "CACHE_REUSE",
                "KV shifting is impossible on hybrid/recurrent models, so CACHE_REUSE has no effect; prefix reuse "
                "comes from context checkpoints (check timings.cache_n)",
            )
        )
    if meta is not None and isinstance(settings.GPU_LAYERS, int) and meta.n_layer + 1 < settings.GPU_LAYERS:
        findings.append(
            Finding(
                "info",
                "GPU_LAYERS",
                f"{settings.GPU_LAYERS} is more than the model's {meta.n_layer} layers: same as 'all'",
            )
        )
    if settings.LLM_HOST not in LOOPBACK_HOSTS and settings.api_key is None:
        findings.append(
            Finding(
                "warning",
                "LLAMA_API_KEY",
                f"llama-server listens on {settings.LLM_HOST} without an API key; set LLAMA_API_KEY (and the "
                "llama_api_key secret in production)",
            )
        )
    return findings


def check_config(settings: HsiSettings, model_meta: ModelMetadata | None = None) -> list[Finding]:
    """Every inconsistency between `settings` (and the model, when its metadata is given), errors first."""
    findings = [
        *_refused(settings),
        *_slot_budget(settings, model_meta),
        *_cache_types(settings, model_meta),
        *_draft(settings, model_meta),
        *_moe(settings, model_meta),
        *_misc(settings, model_meta),
    ]
    order = {"error": 0, "warning": 1, "info": 2}
    return sorted(findings, key=lambda f: order[f.level])
