"""Debian packages that some tests drive (Prometheus and promtool, headless Chromium): installed when missing.

`.ci/run` installs them before the suite; this is the same step for a developer's `pytest` on a fresh machine.
Only the binaries are wanted: the packages' services are never started (a policy-rc.d that denies every start is
put in place during the install when the machine has none), the tests run the binaries themselves on 127.0.0.1.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
APT_TIMEOUT_S = 900


def ensure_debian_tools(binaries: dict[str, str]) -> dict[str, str]:
    """{binary: package} -> {binary: path}; apt-get installs the packages of missing binaries (root only)."""
    missing = sorted({package for binary, package in binaries.items() if shutil.which(binary) is None})
    if missing:
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            pytest.fail(f"{', '.join(missing)} missing and cannot be installed here (needs root and apt-get)")
        _apt_install(missing)
    paths = {binary: shutil.which(binary) for binary in binaries}
    absent = [binary for binary, path in paths.items() if path is None]
    if absent:
        pytest.fail(f"{', '.join(absent)} still not on PATH after installing {', '.join(missing)}")
    return {binary: str(path) for binary, path in paths.items()}


def _apt_install(packages: list[str]) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    placed_policy = False
    if not POLICY_RC_D.exists():
        POLICY_RC_D.write_text("#!/bin/sh\n# hsi-dagster tests: install binaries, start no service\nexit 101\n")
        POLICY_RC_D.chmod(0o755)
        placed_policy = True
    try:
        command = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=APT_TIMEOUT_S)
        if done.returncode != 0:  # an empty or stale package list: refresh it once
            subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, timeout=APT_TIMEOUT_S)
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=APT_TIMEOUT_S)
        if done.returncode != 0:
            pytest.fail(f"apt-get install {' '.join(packages)} failed: {done.stderr[-2000:]}")
    finally:
        if placed_policy:
            POLICY_RC_D.unlink(missing_ok=True)
