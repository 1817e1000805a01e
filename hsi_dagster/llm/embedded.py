"""llama.cpp's own HTTP server, embedded from the `xllamacpp` wheel (no separate binary, no network).

- `build_params` renders `LlamaServerOptions` as `xllamacpp.CommonParams` (the same values production renders as
  llama-server flags).
- `serve` runs the server in this process until SIGINT/SIGTERM (`python -m hsi_dagster.llm.embedded`).
- `EmbeddedServerProcess` starts that module as a separate process, so pipelines and tests talk to a server in
  another process exactly as in production; its log goes to a file, not the console.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from hsi_dagster.llm.options import LlamaServerOptions
from hsi_dagster.settings import GpuLayers, HsiSettings, SettingsError, load_settings

# llama.cpp log levels: 0 output, 1 error, 2 warning, 3 info (xllamacpp default), 4 debug.
DEFAULT_VERBOSITY = 2
_PARENT_PID_ENV = "HSI_EMBEDDED_PARENT_PID"


class EmbeddedServerError(RuntimeError):
    """The embedded server could not start (the message says why and where its log is)."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _gpu_layers(value: GpuLayers) -> int:
    """auto -> -1 (llama.cpp fits layers to free memory), all -> -2 (xllamacpp: "<= -2 is all"), N -> N."""
    if value == "auto":
        return -1
    if value == "all":
        return -2
    return int(value)


def _ggml_type(xllamacpp: Any, value: str, variable: str) -> Any:
    member = getattr(xllamacpp.ggml_type, f"GGML_TYPE_{value.upper()}", None)
    if member is None:
        raise SettingsError(f"{variable}={value!r} is invalid: this xllamacpp build has no such cache type")
    return member


def _expert_overrides(n_cpu_moe: int) -> list[str]:
    """N_CPU_MOE as tensor overrides (this xllamacpp build has no n_cpu_moe parameter)."""
    return [rf"blk\.{i}\.ffn_(up|down|gate)_exps=CPU" for i in range(n_cpu_moe)]


def build_params(options: LlamaServerOptions, *, verbosity: int = DEFAULT_VERBOSITY) -> Any:
    """Render options as xllamacpp.CommonParams; raise SettingsError naming the variable xllamacpp cannot take.

    Refuses what llama-server refuses (`LlamaServerOptions.problems`, shared with the production argv builder),
    plus what only this embedded build lacks."""
    import xllamacpp

    options.check()
    model = Path(options.model_path)
    if not model.is_file():
        raise SettingsError(f"MODEL_PATH={str(model)!r} is invalid: no such file")
    if options.mlock:
        raise SettingsError(
            "MLOCK=true is invalid for the embedded server: this xllamacpp build has no mlock parameter "
            "(use the production llama-server for --mlock)"
        )

    params = xllamacpp.CommonParams()
    params.model.path = str(model)
    params.model_alias = {options.served_name}  # replies and /props name the model by it, not by its path
    params.hostnames = [options.host]
    params.port = int(options.port)
    params.n_ctx = int(options.ctx_size)
    params.n_parallel = int(options.parallel)
    params.kv_unified = False  # each slot gets CTX_SIZE / PARALLEL, as the prompt budget assumes
    params.flash_attn_type = (
        xllamacpp.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_ENABLED
        if options.flash_attention
        else xllamacpp.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_DISABLED
    )
    params.cache_type_k = _ggml_type(xllamacpp, options.cache_type_k, "CACHE_TYPE_K")
    params.cache_type_v = _ggml_type(xllamacpp, options.cache_type_v, "CACHE_TYPE_V")
    params.n_cache_reuse = int(options.cache_reuse)
    # llama.cpp keeps evicted prompts in host RAM up to 8 GiB by default: bounded here (the server's memory grew
    # 578 -> 1,040 MiB in bench/load_bench.py without it).
    params.cache_ram_mib = int(options.cache_ram_mib)
    if options.threads is not None:
        params.cpuparams.n_threads = int(options.threads)
        params.cpuparams_batch.n_threads = int(options.threads)
    params.cpuparams.priority = xllamacpp.ggml_sched_priority(int(options.priority))
    params.cpuparams_batch.priority = xllamacpp.ggml_sched_priority(int(options.priority))
    params.n_batch = int(options.batch_size)
    params.n_ubatch = min(int(params.n_ubatch), int(options.batch_size))
    params.api_keys = [options.api_key] if options.api_key else []
    params.n_gpu_layers = _gpu_layers(options.gpu_layers)

    overrides = [options.override_tensor_text] if options.override_tensor_text else []
    if options.n_cpu_moe:
        overrides += _expert_overrides(options.n_cpu_moe)
    if overrides:
        try:
            params.tensor_buft_overrides = ",".join(overrides)
        except ValueError as exc:
            variable = "OVERRIDE_TENSOR" if options.override_tensor else "N_CPU_MOE"
            value = options.override_tensor_text or options.n_cpu_moe
            raise SettingsError(f"{variable}={value!r} is invalid: {exc}") from None

    if options.draft_model_path:
        draft = Path(options.draft_model_path)
        if not draft.is_file():
            raise SettingsError(f"DRAFT_MODEL_PATH={str(draft)!r} is invalid: no such file")
        params.speculative.draft.mparams.path = str(draft)
        params.speculative.types = [xllamacpp.common_speculative_type.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]

    params.endpoint_metrics = bool(options.metrics)
    params.endpoint_slots = bool(options.slots)
    params.cont_batching = bool(options.cont_batching)
    params.cache_prompt = True
    params.verbosity = int(verbosity)
    params.log_json = False
    params.use_color = False
    return params


def _client_url(host: str, port: int) -> str:
    """The URL a local client uses: a wildcard bind is reached through the loopback address."""
    if host in ("0.0.0.0", "", "::"):
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def serve(
    settings: HsiSettings,
    *,
    on_ready: Callable[[str], None] | None = None,
    verbosity: int = DEFAULT_VERBOSITY,
    stop_event: threading.Event | None = None,
) -> None:
    """Run llama.cpp's server in this process until SIGINT/SIGTERM (or stop_event), then stop it cleanly.

    `on_ready(url)` is called once /health answers ok. Binds LLM_HOST:LLM_PORT (127.0.0.1 by default).
    """
    import xllamacpp

    from hsi_dagster.llm.client import LlamaClient, LlamaServerError

    options = LlamaServerOptions.from_settings(settings)
    params = build_params(options, verbosity=verbosity)
    stop = stop_event or threading.Event()
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, lambda *_: stop.set())
    started = time.monotonic()
    server = None
    try:
        try:
            server = xllamacpp.Server(params)
        except RuntimeError as exc:
            raise EmbeddedServerError(
                f"llama.cpp server failed to start on {options.host}:{options.port} with model {options.model_path}: "
                f"{exc} (see the llama.cpp log lines above: port in use, unreadable model, or too little memory)"
            ) from None
        url = _client_url(options.host, options.port)
        with LlamaClient(
            url, api_key=options.api_key, startup_timeout=settings.LLM_STARTUP_TIMEOUT_SECONDS, backoff_base=0.05
        ) as client:
            try:
                client.wait_until_ready()
                info = client.server_info()
            except LlamaServerError as exc:
                raise EmbeddedServerError(f"llama.cpp server started but is not healthy: {exc}") from None
        print(
            f"llama.cpp server ready at {url} (model {Path(info.model).name}, {info.total_slots} slots x "
            f"{info.slot_context} tokens; started in {time.monotonic() - started:.1f} s)",
            flush=True,
        )
        if on_ready is not None:
            on_ready(url)
        parent = os.environ.get(_PARENT_PID_ENV)
        while not stop.wait(0.5):
            if parent and os.getppid() != int(parent):  # the process that started us is gone: do not linger
                print("llama.cpp server: parent process exited, stopping", flush=True)
                break
    finally:
        if server is not None:
            del server  # its destructor stops the HTTP loop and joins it
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    print("llama.cpp server stopped", flush=True)


class EmbeddedServerProcess:
    """`python -m hsi_dagster.llm.embedded` as a child process, with settings overrides passed as env vars.

    Use as a context manager or call start()/stop(). The server's own log goes to `log_path`.
    """

    def __init__(
        self,
        overrides: Mapping[str, object] | None = None,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        log_path: str | os.PathLike | None = None,
        startup_timeout: float = 120.0,
        env_file: str | None = None,
        verbosity: int = DEFAULT_VERBOSITY,
    ) -> None:
        self.overrides = {key: str(value) for key, value in (overrides or {}).items()}
        self.port = port or free_port()
        self.host = host
        self.url = _client_url(host, self.port)
        self.startup_timeout = startup_timeout
        self.env_file = env_file
        self.verbosity = verbosity
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix=f"llama-server-{self.port}-", suffix=".log")
            os.close(fd)
            log_path = name
        self.log_path = Path(log_path)
        self._proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def start(self, *, wait: bool = True) -> EmbeddedServerProcess:
        """Spawn the server; with wait=True block until GET /health is ok (bounded by startup_timeout)."""
        if self._proc is not None:
            raise EmbeddedServerError(f"embedded server {self.url} was already started")
        env = dict(os.environ)
        env.update(self.overrides)
        env["LLM_HOST"] = self.host
        env["LLM_PORT"] = str(self.port)
        env[_PARENT_PID_ENV] = str(os.getpid())
        env["PYTHONUNBUFFERED"] = "1"
        if self.env_file is not None:
            env["HSI_ENV_FILE"] = self.env_file
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:  # the child keeps its own copy of the descriptor
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "hsi_dagster.llm.embedded", "--verbosity", str(self.verbosity)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        if wait:
            self.wait_until_healthy()
        return self

    def wait_until_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        last = "no answer yet"
        with httpx.Client(timeout=httpx.Timeout(5.0, connect=1.0)) as http:
            while time.monotonic() < deadline:
                if self._proc is None or self._proc.poll() is not None:
                    code = self._proc.returncode if self._proc else None
                    raise EmbeddedServerError(
                        f"embedded llama.cpp server for {self.url} exited with code {code} before it was ready; "
                        f"log {self.log_path}:\n{self.log_tail()}"
                    )
                try:
                    response = http.get(f"{self.url}/health")
                    if response.status_code == 200:
                        return
                    last = f"HTTP {response.status_code}"
                except httpx.HTTPError as exc:
                    last = type(exc).__name__
                time.sleep(0.1)
        self.stop()
        raise EmbeddedServerError(
            f"embedded llama.cpp server at {self.url} was not healthy within {self.startup_timeout:g} s ({last}); "
            f"log {self.log_path}:\n{self.log_tail()}"
        )

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, then SIGKILL after `timeout` seconds. Returns the exit code (None if never started)."""
        from hsi_dagster.llm.client import reset_server_cache

        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout)
        reset_server_cache(self.url)
        return proc.returncode

    def __enter__(self) -> EmbeddedServerProcess:
        if self._proc is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"EmbeddedServerProcess(url={self.url!r}, pid={self.pid}, log={str(self.log_path)!r})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hsi_dagster.llm.embedded",
        description="Run llama.cpp's server (xllamacpp) with the settings from hsi.env and the environment.",
    )
    parser.add_argument(
        "--verbosity", type=int, default=DEFAULT_VERBOSITY, help="llama.cpp log level: 1 errors, 2 warnings, 3 info"
    )
    args = parser.parse_args(argv)
    try:
        serve(load_settings(), verbosity=args.verbosity)
    except (SettingsError, EmbeddedServerError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
