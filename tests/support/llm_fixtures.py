"""Pytest plugin: the real embedded llama.cpp server (one per session) and the fault-injecting fake.

Load it with `pytest_plugins = ["tests.support.llm_fixtures"]` in tests/conftest.py
(or `-p tests.support.llm_fixtures`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from hsi_dagster.llm.embedded import EmbeddedServerProcess, free_port
from hsi_dagster.settings import HsiSettings, load_settings
from tests.support.fake_llama import FakeLlama

# Small enough for 2 CPU cores, large enough to hold output + a minimal prompt per slot (settings validator).
SERVER_SETTINGS = {"CTX_SIZE": 8192, "PARALLEL": 2, "THREADS": 2}


@dataclass(frozen=True)
class RunningLlama:
    url: str
    settings: HsiSettings
    process: EmbeddedServerProcess


def start_embedded(tmp_dir, overrides: dict, *, wait: bool = True, port: int | None = None) -> EmbeddedServerProcess:
    """Start a real embedded server in a subprocess, isolated from any developer .env file."""
    port = port or free_port()
    process = EmbeddedServerProcess(
        overrides, port=port, log_path=tmp_dir / f"llama-server-{port}.log", env_file=os.devnull
    )
    return process.start(wait=wait)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningLlama]:
    """ONE real llama.cpp server (SmolLM2-135M, CTX_SIZE=8192, PARALLEL=2, THREADS=2) for the whole session."""
    process = start_embedded(tmp_path_factory.mktemp("llama"), SERVER_SETTINGS)
    try:
        settings = load_settings(
            env_file=os.devnull, **SERVER_SETTINGS, LLM_PORT=process.port, LLAMA_SERVER_URL=process.url
        )
        yield RunningLlama(url=process.url, settings=settings, process=process)
    finally:
        process.stop()


@pytest.fixture
def fake_llama() -> Iterator[FakeLlama]:
    """A FAKE llama-server for fault injection only (see tests/fake_llama.py)."""
    fake = FakeLlama().start()
    try:
        yield fake
    finally:
        fake.stop()
