"""A fresh Dagster home with the project's dagster.yaml, and the environment a child `hsi` or `dagster` command
gets in tests: that home, a temp DuckDB file, never a developer's hsi.env."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HSI = Path(sys.executable).with_name("hsi")


def project_home(folder: Path) -> Path:
    """`folder`/dagster_home holding the repository's dagster.yaml (run queue, launcher, pools)."""
    home = folder / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    return home


def project_env(home: Path, db: Path | str, **settings: str) -> dict[str, str]:
    """This process's environment for a child command on `home` and `db`; `settings` are HsiSettings values."""
    return {**os.environ, "HSI_ENV_FILE": os.devnull, "DAGSTER_HOME": str(home), "HSI_DUCKDB_PATH": str(db), **settings}


def run_hsi(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The installed `hsi` command, from the repository, output captured."""
    return subprocess.run([str(HSI), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
