"""The repository is a `dg` project ([tool.dg] in pyproject.toml): `dg check defs` and `dg list defs` work from the
repository root, as a user types them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.instance_home import project_env, project_home

REPO = Path(__file__).resolve().parents[2]
DG = Path(sys.executable).parent / "dg"
LINEAGE = ["detection_batches", "enriched_contexts", "budgeted_prompts", "risk_assessments"]


@pytest.fixture
def dg_env(tmp_path: Path) -> dict[str, str]:
    # VIRTUAL_ENV: the project's venv, so dg warns of no mismatch
    return project_env(
        project_home(tmp_path), tmp_path / "hsi.duckdb", VIRTUAL_ENV=str(Path(sys.executable).parents[1])
    )


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
