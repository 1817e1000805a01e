"""Fixtures of the Docker stack tests (test_docker_stack*.py): the images, built once per session."""

from __future__ import annotations

import os

import pytest

from tests.support.docker_images import StackImages, build_stack_images, engine_problem


@pytest.fixture(scope="session")
def images() -> StackImages:
    """The stack's images from the production Dockerfiles on local bases (a rebuild with unchanged inputs takes
    seconds). Skipped only when no engine answers and not in CI (CI=true: an absent engine is a failure)."""
    problem = engine_problem()
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {problem}: .ci/run starts dockerd; see /var/log/dockerd.log")
        pytest.skip(problem)
    log = build_stack_images()
    print(f"image builds (s): {log.seconds}")
    return StackImages()
