"""The local Dagster instance (DAGSTER_HOME): created on first use, pool limits taken from `.env`.

`dagster.yaml` can only hold the default pool limit (1, which serialises DuckDB writers). The `llama_slots`
pool must equal PARALLEL, which lives in `.env`; every `hsi` command that runs the pipeline sets it here.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import dagster as dg

from hsi_dagster.cli.environment import export
from hsi_dagster.partitions import DUCKDB_WRITES_POOL, LLAMA_SLOTS_POOL
from hsi_dagster.settings import HsiSettings

REPO_ROOT = Path(__file__).resolve().parents[2]
INSTANCE_TEMPLATE = REPO_ROOT / "dagster.yaml"
DEFAULT_DAGSTER_HOME = REPO_ROOT / ".dagster_home"


def ensure_dagster_home() -> Path:
    """Use DAGSTER_HOME (default `.dagster_home/` in the repository), creating it with our dagster.yaml."""
    home = Path(os.environ.get("DAGSTER_HOME") or DEFAULT_DAGSTER_HOME).resolve()
    home.mkdir(parents=True, exist_ok=True)
    target = home / "dagster.yaml"
    if not target.exists() and INSTANCE_TEMPLATE.exists():
        shutil.copyfile(INSTANCE_TEMPLATE, target)
    export(DAGSTER_HOME=str(home))
    return home


def apply_pool_limits(instance: dg.DagsterInstance, settings: HsiSettings) -> None:
    """llama_slots = PARALLEL x servers in LLAMA_SERVER_URL (one step per server slot across all runs);
    duckdb_writes = 1."""
    storage = instance.event_log_storage
    storage.set_concurrency_slots(LLAMA_SLOTS_POOL, settings.PARALLEL * len(settings.llm_urls))
    storage.set_concurrency_slots(DUCKDB_WRITES_POOL, 1)


def get_instance(settings: HsiSettings) -> dg.DagsterInstance:
    """The persistent instance the UI reads, with pool limits applied."""
    ensure_dagster_home()
    instance = dg.DagsterInstance.get()
    apply_pool_limits(instance, settings)
    return instance
