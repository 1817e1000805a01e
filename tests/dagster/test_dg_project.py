"""The repository is a `dg` project ([tool.dg] in pyproject.toml): `dg check defs` and `dg list defs` work from the
repository root, as a user types them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DG = Path(sys.executable).parent / "dg"
LINEAGE = ["detection_batches", "enriched_contexts", "budgeted_prompts", "risk_assessments"]


@pytest.fixture
def dg_env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    return {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "HSI_DUCKDB_PATH": str(tmp_path / "hsi.duckdb"),
        "HSI_ENV_FILE": os.devnull,
        "VIRTUAL_ENV": str(Path(sys.executable).parent.parent),  # the project's venv: no mismatch warning
    }


def _dg(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(DG), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=240)


def test_dg_check_defs_passes(dg_env: dict[str, str]) -> None:
    done = _dg(dg_env, "check", "defs")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "All definitions loaded successfully" in done.stdout + done.stderr


def test_dg_list_defs_lists_the_pipeline(dg_env: dict[str, str]) -> None:
    done = _dg(dg_env, "list", "defs", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    listed = json.loads(done.stdout)
    keys = {asset["asset_key"] for asset in listed["assets"]}
    assert set(LINEAGE) <= keys, keys
    deps = {asset["asset_key"]: asset["dependency_keys"] for asset in listed["assets"]}
    for upstream, downstream in zip(LINEAGE, LINEAGE[1:], strict=False):
        assert upstream in deps[downstream], (downstream, deps[downstream])
