"""Shared test set-up: tests never read a developer's `.env`, and the real embedded llama.cpp server fixture."""

import os

os.environ["HSI_ENV_FILE"] = os.devnull

pytest_plugins = ["tests.support.llm_fixtures"]
