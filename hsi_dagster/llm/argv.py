"""The llama-server command line, built from the one settings-to-options mapping (`options.py`).

The production image (`ai/nemotron/`) starts the server with `python -m hsi_dagster.llm.argv --exec`, so the
flags come from the same settings file / environment as every other part of the project. The flag spellings follow
the llama.cpp build pinned in `ai/nemotron/Dockerfile` (LLAMA_CPP_TAG, the same build as the `xllamacpp`
wheel behind the embedded server); check them again when that tag moves.

This module must stay importable with only pydantic + pydantic-settings installed: the server image carries
nothing else.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import warnings
from collections.abc import Sequence

from hsi_dagster.llm.model_files import model_path
from hsi_dagster.llm.options import FLOAT_CACHE_TYPES, LlamaServerOptions, OptionError, parse_override_tensor
from hsi_dagster.settings import SettingsError, load_settings

__all__ = [
    "FLOAT_CACHE_TYPES",
    "ArgvError",
    "LlamaArgvWarning",
    "build_argv",
    "main",
    "parse_override_tensor",
]

# The llama.cpp release the flag spellings below were checked against (ai/nemotron/Dockerfile pins it).
PINNED_LLAMA_CPP_TAG = "b11549"

# Where docker compose mounts the secret; the entrypoint passes it with --api-key-file when present.
DEFAULT_SECRET_FILE = "/run/secrets/llama_api_key"

# An option that cannot become a valid flag: the options' own error, naming the setting to fix (`.variable`).
ArgvError = OptionError


class LlamaArgvWarning(UserWarning):
    """A flag that llama-server accepts but that will not do what the operator expects."""


def build_argv(
    options: LlamaServerOptions, *, binary: str = "llama-server", api_key_file: str | None = None
) -> list[str]:
    """The llama-server argv for `options`; the API key is only ever referenced by file, never inlined.

    Raises ArgvError naming the setting when a value cannot work (`LlamaServerOptions.problems`). Warns
    (LlamaArgvWarning) for a draft model.
    """
    options.check()
    if api_key_file is not None and not api_key_file.strip():
        raise ArgvError("LLAMA_API_KEY_FILE", "empty value")
    argv = [
        binary,
        "--model", str(options.model_path),
        "--alias", options.served_name,
        "--host", options.host,
        "--port", str(options.port),
        "--n-gpu-layers", str(options.gpu_layers),
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
        "--prio", str(options.priority),
        "--prio-batch", str(options.priority),
        "--batch-size", str(options.batch_size),
        "--cache-type-k", options.cache_type_k,
        "--cache-type-v", options.cache_type_v,
        "--cache-reuse", str(options.cache_reuse),
        "--cache-ram", str(options.cache_ram_mib),
    ]  # fmt: skip
    if options.mlock:
        # The pinned build replaced --mlock with --load-mode; mmap+mlock is what --mlock did (mmap stays on).
        argv += ["--load-mode", "mmap+mlock"]
    if options.n_cpu_moe:
        argv += ["--n-cpu-moe", str(options.n_cpu_moe)]
    if options.override_tensor_text is not None:
        argv += ["--override-tensor", options.override_tensor_text]
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
        description="Build the llama-server command line from hsi.env / the environment (the same settings as `hsi`).",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--print", dest="mode", action="store_const", const="print", help="print it as one shell-quoted line (default)"
    )
    mode.add_argument(
        "--exec", dest="mode", action="store_const", const="exec", help="replace this process with llama-server"
    )
    parser.add_argument("--env-file", default=None, help="settings file (default: HSI_ENV_FILE or hsi.env)")
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
            model_file = model_path(settings.MODEL_PATH)
        except FileNotFoundError as exc:
            raise ArgvError("MODEL_PATH", str(exc)) from None
        options = LlamaServerOptions.from_settings(settings, model_path=model_file)
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
