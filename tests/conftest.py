"""Shared test set-up: tests never read a developer's `.env`, each test starts from the same environment, and the
real embedded llama.cpp server fixture."""

import os
from collections.abc import Iterator

import pytest

os.environ["HSI_ENV_FILE"] = os.devnull

pytest_plugins = ["tests.support.llm_fixtures"]


@pytest.fixture(autouse=True)
def _environment_restored() -> Iterator[None]:
    """Undo what a test's in-process `hsi` command exported (cli/environment.py sets values for the workers it
    starts): a variable left behind would reach later tests' settings and the processes they spawn."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)
