"""Settings that are each valid but do not work together, found before a deployment (`hsi config check`).

It lives with its command in cli/ because it checks the whole settings file (llama-server options, the prompt's
floor on a synthetic batch, history, camera profiles), not llm/ alone. The prompt's floor is computed with the
pipeline's own steps (hsi_dagster/steps.py: the context for a batch, the budget, the prompt for the configured
ASSESSMENT_SCHEMA), so it is the floor the `budgeted_prompts` asset would hit.

Every finding names the .env variable to change. Errors are combinations llama-server refuses or that break
the pipeline (a prompt that cannot fit a slot); warnings cost throughput, memory or accuracy; info explains.
With the model's GGUF header (`model_meta`) the checks that depend on the architecture (hybrid, MoE) are exact;
without it they fall back to what is true for the production model and say so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from hsi_dagster.cli.config_probe import PROBE_LABELS, probe_contexts
from hsi_dagster.core.context.camera_profiles import CameraProfile
from hsi_dagster.core.prompt.slot_budget import BudgetChoice
from hsi_dagster.llm.gguf import ModelMetadata
from hsi_dagster.llm.options import FLOAT_CACHE_TYPES, LlamaServerOptions, OptionError
from hsi_dagster.llm.planner import MIB, PlanInputs, plan_from_metadata
from hsi_dagster.settings import MIN_PROMPT_TOKENS, HsiSettings
from hsi_dagster.steps import budget_for, configured_slot_context

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


def configured_budget(settings: HsiSettings) -> BudgetChoice | None:
    """The budget the pipeline falls back to when the server cannot be asked (CTX_SIZE / PARALLEL - output -
    margin); None when that leaves no prompt tokens at all."""
    try:
        return budget_for(settings, None)
    except ValueError:
        return None


def _slot_budget(settings: HsiSettings, meta: ModelMetadata | None) -> list[Finding]:
    slot = configured_slot_context(settings)
    choice = configured_budget(settings)
    budget = choice.budget if choice is not None else 0
    detail = (
        f"each slot holds CTX_SIZE / PARALLEL = {settings.CTX_SIZE} / {settings.PARALLEL} = {slot} tokens; minus "
        f"NEMOTRON_MAX_OUTPUT_TOKENS {settings.NEMOTRON_MAX_OUTPUT_TOKENS} and PROMPT_SAFETY_MARGIN_TOKENS "
        f"{settings.PROMPT_SAFETY_MARGIN_TOKENS} leaves {budget if choice is not None else 'no'} prompt tokens"
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


NO_PROFILE: dict[str, CameraProfile | None] = {"camera_without_profile": None}


def _probe_profiles(settings: HsiSettings) -> tuple[dict[str, CameraProfile | None], list[Finding]]:
    """Camera id -> its profile (CAMERA_CONTEXT_PATH), or one camera without a profile."""
    from hsi_dagster.core.context.camera_profiles import CameraProfileError
    from hsi_dagster.settings import load_camera_profiles

    if settings.CAMERA_CONTEXT_PATH:
        try:
            profiles = load_camera_profiles(settings.CAMERA_CONTEXT_PATH)
        except CameraProfileError as exc:  # e.g. an entry zone not in the camera's zones: every batch would fail
            return NO_PROFILE, [Finding("error", "CAMERA_CONTEXT_PATH", str(exc))]
        except Exception as exc:
            problem = Finding("warning", "CAMERA_CONTEXT_PATH", f"{exc}; the prompt floor is computed without profiles")
            return NO_PROFILE, [problem]
        if profiles:
            return dict(profiles), []
    return NO_PROFILE, []


def _prompt_floor(settings: HsiSettings) -> list[Finding]:
    """Whether every batch can be assessed with these settings: the prompt's floor (core/prompt/budget.py: every section
    removed, the rest degraded, the static instructions without their examples) of a representative batch on each
    profiled camera, against the budget CTX_SIZE / PARALLEL - output - margin scaled by PROMPT_TOKEN_RATIO. Over it,
    batches are not assessed and alert; a batch that needs the worked examples dropped loses the cached prefix."""
    from hsi_dagster.core.prompt.budget import WORKED_EXAMPLES, PromptTooLarge
    from hsi_dagster.steps import prompt_floor_for, prompt_for

    choice = configured_budget(settings)
    if choice is None:
        return []  # _slot_budget reports it
    budget, ratio, schema = choice.budget, choice.token_ratio, settings.ASSESSMENT_SCHEMA
    floors: dict[str, int] = {}
    degraded: dict[str, list[str]] = {}
    profiles, problems = _probe_profiles(settings)
    contexts = probe_contexts(settings, profiles)
    for camera, context in contexts.items():
        floors[camera] = prompt_floor_for(context, schema)
        try:
            degraded[camera] = prompt_for(context, choice.estimate_budget, schema, batch_id=None).degraded
        except PromptTooLarge:
            degraded[camera] = ["floor"]
    worst = max(floors, key=floors.__getitem__)
    floor = floors[worst]
    served_floor = math.ceil(floor * ratio)
    detail = (
        f"the smallest prompt a batch can be sent (its floor: {schema} static instructions without the worked "
        f"examples, camera profile of {worst!r}, the detections header) is {floor} cl100k tokens x "
        f"PROMPT_TOKEN_RATIO {ratio} = {served_floor}; the budget is CTX_SIZE / PARALLEL - NEMOTRON_MAX_OUTPUT_TOKENS "
        f"- PROMPT_SAFETY_MARGIN_TOKENS "
        f"= {choice.slot_context} - {settings.NEMOTRON_MAX_OUTPUT_TOKENS} - {settings.PROMPT_SAFETY_MARGIN_TOKENS} "
        f"= {budget}"
    )
    if served_floor > budget:
        needed_slot = served_floor + settings.NEMOTRON_MAX_OUTPUT_TOKENS + settings.PROMPT_SAFETY_MARGIN_TOKENS
        return problems + [
            Finding(
                "error",
                "CTX_SIZE",
                f"{detail}: batches cannot be assessed (they alert unassessed); raise CTX_SIZE to at least "
                f"{needed_slot * settings.PARALLEL} or lower PARALLEL, NEMOTRON_MAX_OUTPUT_TOKENS or "
                "PROMPT_SAFETY_MARGIN_TOKENS (or shorten the camera profile)",
            )
        ]
    examples_dropped = sorted(camera for camera, steps in degraded.items() if WORKED_EXAMPLES in steps)
    if examples_dropped:
        return problems + [
            Finding(
                "warning",
                "CTX_SIZE",
                f"{detail}: a batch of {len(PROBE_LABELS)} tracks with full enrichment on {examples_dropped[0]!r} "
                "only fits without the worked examples of the static prompt (less accurate, and the server's prompt "
                "cache misses it); raise CTX_SIZE or lower PARALLEL",
            )
        ]
    if any(degraded.values()):
        steps = sorted({step for steps in degraded.values() for step in steps})
        return problems + [
            Finding(
                "warning",
                "CTX_SIZE",
                f"{detail}: a batch of {len(PROBE_LABELS)} tracks with full enrichment only fits with every enrichment "
                f"section removed and its evidence cut to counts ({', '.join(steps)}); it is still assessed, on less; "
                "raise CTX_SIZE or lower PARALLEL",
            )
        ]
    return problems


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


def _history(settings: HsiSettings) -> list[Finding]:
    """History baselines (core/context/history.py) read the hour in each camera's time zone: name the cameras without
    one."""
    if not settings.HISTORY_ENABLED:
        return []
    findings = []
    if settings.HISTORY_MIN_DAYS > settings.HISTORY_DAYS:
        findings.append(
            Finding(
                "error",
                "HISTORY_MIN_DAYS",
                f"{settings.HISTORY_MIN_DAYS} days of history needed but only HISTORY_DAYS={settings.HISTORY_DAYS} "
                "are counted: no baseline would ever call anything unusual",
            )
        )
    if not settings.CAMERA_CONTEXT_PATH:  # no profiles at all: the prompt says "UTC assumed" per batch
        return findings
    from hsi_dagster.core.context.camera_profiles import CameraProfileError
    from hsi_dagster.core.context.history import profile_timezone
    from hsi_dagster.settings import load_camera_profiles

    try:
        profiles = load_camera_profiles(settings.CAMERA_CONTEXT_PATH)
    except (CameraProfileError, OSError):
        return findings  # reported by the prompt-floor check
    without = sorted(camera for camera, profile in profiles.items() if profile_timezone(profile) is None)
    if without:
        findings.append(
            Finding(
                "warning",
                "CAMERA_CONTEXT_PATH",
                f"camera(s) without a timezone: {', '.join(without)}; their history baselines assume UTC (the prompt "
                "says so), so an hour across a daylight-saving change is compared with the wrong one",
            )
        )
    return findings


def check_config(settings: HsiSettings, model_meta: ModelMetadata | None = None) -> list[Finding]:
    """Every inconsistency between `settings` (and the model, when its metadata is given), errors first."""
    findings = [
        *_refused(settings),
        *_slot_budget(settings, model_meta),
        *_prompt_floor(settings),
        *_cache_types(settings, model_meta),
        *_draft(settings, model_meta),
        *_moe(settings, model_meta),
        *_misc(settings, model_meta),
        *_history(settings),
    ]
    order = {"error": 0, "warning": 1, "info": 2}
    return sorted(findings, key=lambda f: order[f.level])
