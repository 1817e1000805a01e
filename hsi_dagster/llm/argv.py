"""The llama-server command line, built from the one settings-to-options mapping (`options.py`).

The production image (`ai/nemotron/`) starts the server with `python -m hsi_dagster.llm.argv --exec`, so the
flags come from the same `.env` / environment as every other part of the project. The flag spellings follow
the llama.cpp build pinned in `ai/nemotron/Dockerfile` (LLAMA_CPP_TAG, the same build as the `xllamacpp`
wheel behind the embedded server); check them again when that tag moves.

This module must stay importable with only pydantic + pydantic-settings installed: the server image carries
nothing else.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
import warnings
from collections.abc import Sequence

from hsi_dagster.llm.options import LlamaServerOptions
from hsi_dagster.settings import KV_CACHE_TYPES, SettingsError, load_settings

# The llama.cpp release the flag spellings below were checked against (ai/nemotron/Dockerfile pins it).
PINNED_LLAMA_CPP_TAG = "b11549"

# Where docker compose mounts the secret; the entrypoint passes it with --api-key-file when present.
DEFAULT_SECRET_FILE = "/run/secrets/llama_api_key"

# Cache types llama.cpp can only use for V with flash attention ("quantized V cache requires flash_attn").
FLOAT_CACHE_TYPES = ("f32", "f16", "bf16")

# Settings variable behind each option, for error messages that name what the operator has to edit.
VARIABLE_OF = {
    "model_path": "MODEL_PATH",
    "host": "LLM_HOST",
    "port": "LLM_PORT",
    "ctx_size": "CTX_SIZE",
    "parallel": "PARALLEL",
    "gpu_layers": "GPU_LAYERS",
    "flash_attention": "FLASH_ATTENTION",
    "cache_type_k": "CACHE_TYPE_K",
    "cache_type_v": "CACHE_TYPE_V",
    "cache_reuse": "CACHE_REUSE",
    "threads": "THREADS",
    "batch_size": "BATCH_SIZE",
    "mlock": "MLOCK",
    "n_cpu_moe": "N_CPU_MOE",
    "override_tensor": "OVERRIDE_TENSOR",
    "draft_model_path": "DRAFT_MODEL_PATH",
    "api_key_file": "LLAMA_API_KEY_FILE",
}


class ArgvError(ValueError):
    """An option cannot become a valid llama-server flag; `variable` is the setting to fix."""

    def __init__(self, variable: str, message: str) -> None:
        super().__init__(f"{variable}: {message}")
        self.variable = variable


class LlamaArgvWarning(UserWarning):
    """A flag that llama-server accepts but that will not do what the operator expects."""


def parse_override_tensor(value: str) -> list[tuple[str, str]]:
    """Split `PATTERN=BUFFER[,PATTERN=BUFFER...]` as llama.cpp does; raise ArgvError on a malformed entry."""
    entries = []
    for raw in value.split(","):
        pattern, sep, buffer = raw.strip().partition("=")
        if not sep or not pattern or not buffer:
            raise ArgvError(
                "OVERRIDE_TENSOR",
                f"{value!r} is invalid: each entry must read <tensor name regex>=<buffer type>, e.g. 'exps=CPU'",
            )
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ArgvError("OVERRIDE_TENSOR", f"{pattern!r} is not a valid regular expression ({exc})") from None
        entries.append((pattern, buffer))
    return entries


def _validate(options: LlamaServerOptions, api_key_file: str | None) -> None:
    """Reject values llama-server would refuse (or silently misread) before it spends minutes loading."""
    if not str(options.model_path).strip():
        raise ArgvError("MODEL_PATH", "empty value")
    if not options.host or any(ch.isspace() for ch in options.host):
        raise ArgvError("LLM_HOST", f"{options.host!r} is not a host address")
    if not 1 <= options.port <= 65535:
        raise ArgvError("LLM_PORT", f"{options.port} is outside 1-65535")
    if options.parallel < 1:
        raise ArgvError("PARALLEL", f"{options.parallel} must be at least 1")
    if options.ctx_size < options.parallel:
        raise ArgvError("CTX_SIZE", f"{options.ctx_size} leaves no context for each of the {options.parallel} slots")
    gpu_layers = str(options.gpu_layers).strip().lower()
    if not (gpu_layers in ("auto", "all") or gpu_layers.isdigit()):
        raise ArgvError(
            "GPU_LAYERS", f"{options.gpu_layers!r} is invalid: accepted values are auto, all, or a whole number"
        )
    for field in ("cache_type_k", "cache_type_v"):
        value = getattr(options, field)
        if value not in KV_CACHE_TYPES:
            raise ArgvError(
                VARIABLE_OF[field], f"{value!r} is invalid: accepted values are {', '.join(KV_CACHE_TYPES)}"
            )
    if options.cache_type_v not in FLOAT_CACHE_TYPES and not options.flash_attention:
        raise ArgvError(
            "CACHE_TYPE_V",
            f"{options.cache_type_v} needs FLASH_ATTENTION=true (llama.cpp refuses a quantized V cache without it)",
        )
    for field, minimum in (("cache_reuse", 0), ("batch_size", 1), ("threads", 1), ("n_cpu_moe", 0)):
        value = getattr(options, field)
        if value is not None and value < minimum:
            raise ArgvError(VARIABLE_OF[field], f"{value} must be at least {minimum}")
    if options.override_tensor is not None:
        parse_override_tensor(options.override_tensor)
        if options.n_cpu_moe is not None:
            raise ArgvError(
                "N_CPU_MOE",
                "set together with OVERRIDE_TENSOR; both place MoE expert tensors, set only one of them",
            )
    if api_key_file is not None and not api_key_file.strip():
        raise ArgvError("LLAMA_API_KEY_FILE", "empty value")


def build_argv(
    options: LlamaServerOptions, *, binary: str = "llama-server", api_key_file: str | None = None
) -> list[str]:
    """The llama-server argv for `options`; the API key is only ever referenced by file, never inlined.

    Raises ArgvError naming the setting when a value cannot work. Warns (LlamaArgvWarning) for a draft model.
    """
    _validate(options, api_key_file)
    argv = [
        binary,
        "--model", str(options.model_path),
        "--alias", options.served_name,
        "--host", options.host,
        "--port", str(options.port),
        "--n-gpu-layers", str(options.gpu_layers).strip().lower(),
        "--ctx-size", str(options.ctx_size),
        "--parallel", str(options.parallel),
        "--cont-batching" if options.cont_batching else "--no-cont-batching",
    ]  # fmt: skip
    if options.metrics:
        argv.append("--metrics")
    argv.append("--slots" if options.slots else "--no-slots")
    argv += ["--flash-attn", "on" if options.flash_attention else "off"]
    if options.threads is not None:
        argv += ["--threads", str(options.threads)]
    argv += [
        "--batch-size", str(options.batch_size),
        "--cache-type-k", options.cache_type_k,
        "--cache-type-v", options.cache_type_v,
        "--cache-reuse", str(options.cache_reuse),
    ]  # fmt: skip
    if options.mlock:
        # The pinned build replaced --mlock with --load-mode; mmap+mlock is what --mlock did (mmap stays on).
        argv += ["--load-mode", "mmap+mlock"]
    if options.n_cpu_moe:
        argv += ["--n-cpu-moe", str(options.n_cpu_moe)]
    if options.override_tensor is not None:
        argv += ["--override-tensor", options.override_tensor]
    if options.draft_model_path:
        warnings.warn(
            "DRAFT_MODEL_PATH is set: llama.cpp refuses speculative decoding for hybrid/recurrent models such as "
            "Nemotron-3-Nano ('not supported by this context'); expect the server to fail or ignore the draft",
            LlamaArgvWarning,
            stacklevel=2,
        )
        # The pinned build does not speculate unless a type is named (default: none).
        argv += ["--spec-type", "draft-simple", "--model-draft", options.draft_model_path]
    if api_key_file is not None:
        argv += ["--api-key-file", api_key_file]
    return argv


def _key_file_from_environment(explicit: str | None) -> str | None:
    """The key file named on the command line, else LLAMA_API_KEY_FILE; the entrypoint passes the secret."""
    if explicit:
        return explicit
    return os.environ.get("LLAMA_API_KEY_FILE") or None


def _memfd_key_file(key: str) -> str:
    """Hand the key to llama-server through an in-memory file: never on disk, argv or its environment."""
    fd = os.memfd_create("llama_api_key")
    os.write(fd, key.encode() + b"\n")
    os.set_inheritable(fd, True)
    return f"/proc/self/fd/{fd}"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m hsi_dagster.llm.argv",
        description="Build the llama-server command line from .env / the environment (the same settings as `hsi`).",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--print", dest="mode", action="store_const", const="print", help="print it as one shell-quoted line (default)"
    )
    mode.add_argument(
        "--exec", dest="mode", action="store_const", const="exec", help="replace this process with llama-server"
    )
    parser.add_argument("--env-file", default=None, help="settings file (default: HSI_ENV_FILE or .env)")
    parser.add_argument(
        "--binary", default="llama-server", help="llama-server executable (default: llama-server on PATH)"
    )
    parser.add_argument(
        "--api-key-file", default=None, help="file holding the API key(s), one per line (default: LLAMA_API_KEY_FILE)"
    )
    parser.set_defaults(mode="print")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: print or exec the llama-server argv. Exit 2 with the variable's name when a setting is invalid."""
    args = _parser().parse_args(argv)
    try:
        settings = load_settings(args.env_file)
        try:
            model_path = settings.model_file
        except FileNotFoundError as exc:
            raise ArgvError("MODEL_PATH", str(exc)) from None
        options = LlamaServerOptions.from_settings(settings, model_path=model_path)
        key_file = _key_file_from_environment(args.api_key_file)
        if key_file is not None and args.mode == "exec" and not os.path.isfile(key_file):
            raise ArgvError("LLAMA_API_KEY_FILE", f"{key_file} does not exist")
        inline_key = settings.api_key if key_file is None else None
        if inline_key and args.mode == "print":
            key_file = "<in-memory copy of LLAMA_API_KEY>"
        elif inline_key:
            key_file = _memfd_key_file(inline_key)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", LlamaArgvWarning)
            command = build_argv(options, binary=args.binary, api_key_file=key_file)
        for warning in caught:
            print(f"warning: {warning.message}", file=sys.stderr)
        if args.mode == "exec" and not os.path.isfile(command[command.index("--model") + 1]):
            raise ArgvError("MODEL_PATH", f"{options.model_path} does not exist (is the model volume mounted?)")
    except (SettingsError, ArgvError) as exc:
        print(
            f"error: invalid configuration: {exc}" if isinstance(exc, ArgvError) else f"error: {exc}", file=sys.stderr
        )
        return 2
    if args.mode == "print":
        print(shlex.join(command))
        return 0
    env = dict(os.environ)
    env.pop("LLAMA_API_KEY", None)  # llama-server would read it as --api-key; the key goes by file only
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(command[0], command, env)
    return 0  # pragma: no cover - execvpe does not return


if __name__ == "__main__":
    sys.exit(main())
