"""LlamaClient against the REAL embedded llama.cpp server (SmolLM2-135M in a subprocess, 2 slots x 4096 tokens),
plus the settings -> xllamacpp mapping of the embedded server."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

import httpx
import pytest
from pydantic import BaseModel, Field

from hsi_dagster.llm.client import LlamaClient, LlamaRequestRejected, slot_semaphore_size
from hsi_dagster.llm.embedded import EmbeddedServerProcess, build_params
from hsi_dagster.llm.options import LlamaServerOptions
from hsi_dagster.settings import SettingsError, load_settings
from tests.support.llm_fixtures import RunningLlama, start_embedded
from tests.support.server_watch import ServerWatcher

llm = pytest.mark.llm

API_KEY = "hsi-test-key-7f3a9c"


class Verdict(BaseModel):
    risk: Literal["low", "medium", "high"]
    reason: str = Field(max_length=40)


def ask(topic: str) -> list[dict]:
    return [
        {"role": "system", "content": "You rate security risk. Answer with JSON only."},
        {"role": "user", "content": f"A camera saw: {topic}. Rate the risk."},
    ]


# --- readiness, context, schema ------------------------------------------------------------------------------------


@dataclass
class KeyedServer:
    process: EmbeddedServerProcess
    not_ready_probes: int
    waited_seconds: float


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KeyedServer]:
    """A second real server, with LLAMA_API_KEY, started WITHOUT waiting: the client's readiness wait does it."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("hsi_dagster.llm")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    process = start_embedded(
        tmp_path_factory.mktemp("keyed"),
        {"CTX_SIZE": 4096, "PARALLEL": 1, "THREADS": 2, "LLAMA_API_KEY": API_KEY},
        wait=False,
    )
    try:
        started = time.monotonic()
        with LlamaClient(process.url, startup_timeout=60, backoff_base=0.05) as client:
            client.wait_until_ready()  # /health needs no key
        waited = time.monotonic() - started
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        not_ready = sum("not ready yet" in r.getMessage() for r in records)
        yield KeyedServer(process, not_ready, waited)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        process.stop()


@llm
def test_wait_until_ready_covers_server_startup(keyed_server: KeyedServer) -> None:
    """The client waited through a server that was not up yet (refused/loading), and it is healthy afterwards."""
    assert keyed_server.not_ready_probes >= 1
    assert keyed_server.waited_seconds < 60
    assert httpx.get(f"{keyed_server.process.url}/health").status_code == 200


@llm
def test_per_slot_context_is_ctx_size_over_parallel(llama_server: RunningLlama) -> None:
    """/props reports the context of ONE slot: CTX_SIZE / PARALLEL = 8192 / 2, matching settings.slot_context."""
    with LlamaClient(llama_server.url) as client:
        client.wait_until_ready()
        info = client.server_info()
    assert info.slot_context == 4096 == llama_server.settings.slot_context
    assert info.total_slots == 2 == llama_server.settings.PARALLEL
    assert info.model.endswith("SmolLM2-135M-Instruct.Q4_1.gguf")
    assert info.chat_template and "<|im_start|>" in info.chat_template


@llm
def test_schema_constrained_completion_parses_into_pydantic(llama_server: RunningLlama) -> None:
    """The real model's output, constrained by the JSON schema, validates as the pydantic model."""
    with LlamaClient(llama_server.url) as client:
        result = client.chat_json(ask("a person at the back door at 3am"), Verdict.model_json_schema(), max_tokens=64)
    assert result.parse_error is None, result.content
    verdict = Verdict.model_validate(result.parsed)
    assert verdict.risk in ("low", "medium", "high")
    assert result.finish_reason == "stop"
    assert result.usage.prompt_tokens > 20 and 0 < result.usage.completion_tokens <= 64
    assert result.latency_ms > 0 and result.timings["predicted_n"] == result.usage.completion_tokens
    assert result.model.endswith(".gguf")


@llm
def test_enforcement_probe_and_ensure_ready(llama_server: RunningLlama) -> None:
    """The nonce probe passes on the real server; ensure_ready caches per base URL and sizes the slot limiter."""
    with LlamaClient(llama_server.url) as client:
        client.verify_schema_enforcement()
        info = client.ensure_ready()
    with LlamaClient(llama_server.url) as other:
        assert other.ensure_ready() is info  # once per process per URL
    assert info.slot_context == 4096
    assert slot_semaphore_size(llama_server.url) == 2


@llm
def test_count_prompt_tokens_equals_server_usage(llama_server: RunningLlama) -> None:
    """/apply-template + /tokenize gives exactly the prompt_tokens the real completion reports."""
    messages = ask(f"a delivery van, plate {uuid.uuid4().hex[:8]}")
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    with LlamaClient(llama_server.url) as client:
        counted = client.count_prompt_tokens(messages)
        result = client.chat_json(messages, schema, max_tokens=16)
    assert counted == result.usage.prompt_tokens
    assert counted > 25


@llm
def test_api_key_required_and_never_leaked(keyed_server: KeyedServer, caplog: pytest.LogCaptureFixture) -> None:
    """With LLAMA_API_KEY the server answers 401 without the key and works with it; the key leaks nowhere."""
    url = keyed_server.process.url
    caplog.set_level(logging.DEBUG)
    assert httpx.get(f"{url}/props").status_code == 401

    with LlamaClient(url, max_tries=1) as anonymous, pytest.raises(LlamaRequestRejected) as err:
        anonymous.server_info()
    assert err.value.status == 401 and f"GET {url}/props" in str(err.value)

    wrong = API_KEY[::-1]
    with LlamaClient(url, api_key=wrong) as mistaken, pytest.raises(LlamaRequestRejected) as wrong_err:
        mistaken.count_prompt_tokens(ask("a cat"))
    assert wrong_err.value.status == 401

    with LlamaClient(url, api_key=API_KEY) as client:
        info = client.ensure_ready()
        result = client.chat_json(ask("a cat on the porch"), Verdict.model_json_schema(), max_tokens=64)
    assert info.total_slots == 1 and info.slot_context == 4096
    Verdict.model_validate(result.parsed)

    for text in (str(err.value), str(wrong_err.value), caplog.text, repr(client)):
        assert API_KEY not in text and wrong not in text
    assert API_KEY not in keyed_server.process.log_path.read_text()


# --- slots and concurrency -----------------------------------------------------------------------------------------

LONG_SCHEMA = {
    "type": "object",
    "properties": {"story": {"type": "string", "minLength": 120, "maxLength": 160}},
    "required": ["story"],
}


@llm
def test_client_never_exceeds_server_slots(llama_server: RunningLlama) -> None:
    """3 x PARALLEL requests from 6 threads on 3 clients: the server never has more than PARALLEL in flight
    and never defers (queues) a request, because the process-wide semaphore holds the extras back."""
    parallel = llama_server.settings.PARALLEL
    clients = [LlamaClient(llama_server.url) for _ in range(3)]
    try:
        clients[0].ensure_ready()
        with ServerWatcher(llama_server.url) as watcher, ThreadPoolExecutor(3 * parallel) as pool:
            results = list(
                pool.map(
                    lambda i: clients[i % 3].chat_json(ask(f"event {i}"), LONG_SCHEMA, max_tokens=64, seed=i),
                    range(3 * parallel),
                )
            )
    finally:
        for client in clients:
            client.close()
    assert len(results) == 3 * parallel and all(r.usage.completion_tokens > 0 for r in results)
    assert watcher.polls >= 10
    assert watcher.max_processing == parallel  # both slots were used ...
    assert watcher.max_deferred == 0  # ... and nothing waited inside the server


@llm
def test_without_the_semaphore_the_server_queues(llama_server: RunningLlama) -> None:
    """Control for the test above: the same load sent with raw httpx (no client semaphore) makes the server defer
    requests, so the watcher can see the failure the semaphore prevents."""
    parallel = llama_server.settings.PARALLEL
    body = {
        "max_tokens": 64,
        "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": LONG_SCHEMA}},
    }

    def raw(i: int) -> int:
        reply = httpx.post(
            f"{llama_server.url}/v1/chat/completions", json={**body, "messages": ask(f"raw {i}")}, timeout=120
        )
        return reply.status_code

    with ServerWatcher(llama_server.url) as watcher, ThreadPoolExecutor(3 * parallel) as pool:
        statuses = list(pool.map(raw, range(3 * parallel)))
    assert statuses == [200] * (3 * parallel)
    assert watcher.max_processing == parallel
    assert watcher.max_deferred > 0


# --- the embedded server itself -------------------------------------------------------------------------------------


@llm
def test_embedded_process_logs_to_file_and_stops_cleanly_on_sigterm(tmp_path) -> None:
    """The subprocess announces readiness in its log file (not the console) and exits 0 on SIGTERM."""
    process = start_embedded(tmp_path, {"CTX_SIZE": 4096, "PARALLEL": 1, "THREADS": 2})
    try:
        assert process.running and process.pid
        assert httpx.get(f"{process.url}/health").status_code == 200
    finally:
        code = process.stop()
    assert code == 0
    assert not process.running
    log = process.log_path.read_text()
    assert (
        f"llama.cpp server ready at {process.url} (model SmolLM2-135M-Instruct.Q4_1.gguf, 1 slots x 4096 tokens" in log
    )
    assert "llama.cpp server stopped" in log
    assert " I srv " not in log  # info-level C++ chatter is turned down (verbosity 2: warnings and errors)


def _options(**overrides: object) -> LlamaServerOptions:
    settings = load_settings(env_file=os.devnull, CTX_SIZE=8192, PARALLEL=2, THREADS=2, LLM_PORT=18555)
    return dataclasses.replace(LlamaServerOptions.from_settings(settings), **overrides)


def test_build_params_maps_every_option() -> None:
    """Each overlapping setting lands in the matching xllamacpp CommonParams field."""
    import xllamacpp

    options = _options(
        cache_type_k="q8_0",
        cache_type_v="q4_0",
        gpu_layers="all",
        api_key="k1",
        cache_reuse=128,
        batch_size=256,
        n_cpu_moe=2,
        override_tensor=None,
        host="0.0.0.0",
    )
    params = build_params(options)
    assert params.model.path == str(options.model_path)
    assert params.hostnames == ["0.0.0.0"] and params.port == 18555
    assert params.n_ctx == 8192 and params.n_parallel == 2 and params.kv_unified is False
    assert params.flash_attn_type == xllamacpp.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_ENABLED
    assert params.cache_type_k == xllamacpp.ggml_type.GGML_TYPE_Q8_0
    assert params.cache_type_v == xllamacpp.ggml_type.GGML_TYPE_Q4_0
    assert params.n_cache_reuse == 128 and params.n_batch == 256 and params.n_ubatch == 256
    assert params.cpuparams.n_threads == 2 and params.cpuparams_batch.n_threads == 2
    assert params.api_keys == ["k1"]
    assert params.n_gpu_layers == -2  # xllamacpp: -1 auto, <= -2 all
    assert params.tensor_buft_overrides == r"blk\.0\.ffn_(up|down|gate)_exps=CPU,blk\.1\.ffn_(up|down|gate)_exps=CPU"
    assert params.endpoint_metrics and params.endpoint_slots and params.cont_batching
    assert params.verbosity == 2
    assert build_params(_options(gpu_layers="auto")).n_gpu_layers == -1
    assert build_params(_options(gpu_layers="12")).n_gpu_layers == 12


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"gpu_layers": "most"}, "GPU_LAYERS='most'"),
        ({"cache_type_k": "q3_k"}, "CACHE_TYPE_K='q3_k'"),
        ({"model_path": "/nonexistent/model.gguf"}, "MODEL_PATH='/nonexistent/model.gguf'"),
        ({"mlock": True}, "MLOCK=true"),
        (
            {"cache_type_v": "q8_0", "flash_attention": False},
            "CACHE_TYPE_V='q8_0' is invalid with FLASH_ATTENTION=false",
        ),
        ({"override_tensor": "exps=NOSUCHDEVICE"}, "OVERRIDE_TENSOR='exps=NOSUCHDEVICE'"),
        ({"draft_model_path": "/nonexistent/draft.gguf"}, "DRAFT_MODEL_PATH='/nonexistent/draft.gguf'"),
    ],
)
def test_build_params_rejects_what_xllamacpp_cannot_take(overrides: dict, named: str) -> None:
    """Values xllamacpp would refuse (or silently misread) fail early with the variable named."""
    with pytest.raises(SettingsError) as err:
        build_params(_options(**overrides))
    assert named in str(err.value)
