"""Factories for the LLM tests that use FAKE servers (fault injection only, tests/support/fake_llama.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from hsi_dagster.llm.client import LlamaClient
from tests.support.fake_llama import FakeLlama


@pytest.fixture
def start_fake() -> Iterator[Callable[..., FakeLlama]]:
    """start_fake(cls=FakeLlama, **fields): a started FAKE server, stopped after the test."""
    made: list[FakeLlama] = []

    def start(cls: type[FakeLlama] = FakeLlama, **kwargs) -> FakeLlama:
        fake = cls(**kwargs).start()
        made.append(fake)
        return fake

    yield start
    for fake in made:
        fake.stop()


@pytest.fixture
def fast_client() -> Iterator[Callable[..., LlamaClient]]:
    """fast_client(url, **kwargs): a LlamaClient with 10 ms back-off and a 5 s start-up timeout, closed after."""
    made: list[LlamaClient] = []

    def make(url: str, **kwargs) -> LlamaClient:
        kwargs.setdefault("backoff_base", 0.01)
        kwargs.setdefault("startup_timeout", 5.0)
        client = LlamaClient(url, **kwargs)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()
