"""`hsi plan`: does the model fit the GPU with these settings? Prints the estimate of hsi_dagster.llm.planner."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hsi_dagster.llm.gguf import read_metadata
from hsi_dagster.llm.model_files import model_path
from hsi_dagster.llm.options import LlamaServerOptions
from hsi_dagster.llm.planner import Plan, PlanInputs, format_bytes, plan_from_metadata


def add_plan_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Arguments of `hsi plan`; settings not given here come from hsi.env / the environment."""
    parser.add_argument("--model", default=None, help="GGUF file (default: MODEL_PATH, else the bundled SmolLM2)")
    parser.add_argument("--gpu-mem-gib", type=float, default=None, help="GPU memory to plan for, GiB (e.g. 24)")
    parser.add_argument("--env-file", default=None, help="settings file (default: HSI_ENV_FILE or hsi.env)")
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
        model = Path(args.model) if args.model else model_path(settings.MODEL_PATH)
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
    try:
        options = LlamaServerOptions.from_settings(settings, model_path=model)
        plan = plan_from_metadata(meta, PlanInputs.from_options(options, gpu_mem_gib=args.gpu_mem_gib))
    except SettingsError as exc:  # e.g. OVERRIDE_TENSOR that does not parse (OptionError)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(plan.to_dict(), indent=2, default=str) if args.json else format_plan(plan))
    return 1 if plan.fits is False else 0


def format_plan(plan: Plan) -> str:
    """The plan as the text `hsi plan` prints."""
    i, b = plan.inputs, format_bytes
    moe = f", {plan.n_expert} experts" if plan.n_expert else ""
    lines = [
        f"model: {plan.model} ({plan.architecture}): {plan.n_layer} layers, {plan.attention_layers} with attention, "
        f"{plan.recurrent_layers} recurrent{moe}",
        f"settings: CTX_SIZE={i.ctx_size} PARALLEL={i.parallel} (slot {plan.slot_cells} tokens) "
        f"CACHE_TYPE_K={i.cache_type_k} CACHE_TYPE_V={i.cache_type_v} GPU_LAYERS={i.gpu_layers} "
        f"N_CPU_MOE={i.n_cpu_moe if i.n_cpu_moe is not None else '-'} FLASH_ATTENTION={str(i.flash_attention).lower()}",
        "GPU memory (estimate):",
        f"  weights            {b(plan.weights_gpu_bytes):>11}  (of {b(plan.weights_total_bytes)}; "
        f"{b(plan.experts_cpu_bytes)} of experts on the CPU)",
        f"  KV cache           {b(plan.kv_gpu_bytes):>11}  "
        f"({plan.kv_bytes_per_token / 1024:.2f} KiB/token x {plan.kv_cells} cells)",
        f"  recurrent state    {b(plan.recurrent_gpu_bytes):>11}  "
        f"({b(plan.recurrent_bytes_per_seq)}/slot x {i.parallel}, f32)",
        f"  compute buffers   ~{b(plan.compute_bytes):>11}  (rough)",
        f"  CUDA overhead     ~{b(plan.overhead_bytes):>11}",
        f"  total              {b(plan.gpu_total_bytes):>11}",
        f"host RAM for weights/state kept on the CPU: {b(plan.host_bytes)}",
    ]
    if plan.gpu_mem_bytes is None:
        lines.append("fit: pass --gpu-mem-gib to judge the fit")
    else:
        verdict = "fits" if plan.fits else "DOES NOT FIT"
        lines.append(
            f"fit: {verdict} in {b(plan.gpu_mem_bytes)} with llama.cpp's {b(plan.margin_bytes)} margin "
            f"(headroom {b(plan.headroom_bytes or 0)})"
        )
    if plan.suggestions:
        lines.append("what to change:")
        lines += [f"  - {s}" for s in plan.suggestions]
    if plan.notes:
        lines.append("notes:")
        lines += [f"  - {n}" for n in plan.notes]
    return "\n".join(lines)
