"""Where the LLM resource shares the schema probe's pass (hsi_dagster/llm/probe_cache.py): HSI_PROBE_CACHE_DIR when
set, else the Dagster instance's storage directory, else nowhere. On the real embedded server, one process per run
(ensure_ready probes once per process), each building its resource from settings the way definitions.py does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from hsi_dagster.definitions import build_resources
from hsi_dagster.llm import probe_cache
from hsi_dagster.settings import load_settings
from tests.support.llm_fixtures import RunningLlama

# One process = one run: a resource from settings (HSI_PROBE_CACHE_DIR if given), set up on the Dagster instance at
# `home` if given (else used outside a run), then ensure_ready with the probe counted (or forbidden).
CHILD = """
import os, sys
import dagster as dg
from hsi_dagster.definitions import build_resources
from hsi_dagster.llm.client import LlamaClient
from hsi_dagster.settings import load_settings
url, mode, cache, home = sys.argv[1:5]
probes = []
original = LlamaClient.verify_schema_enforcement
def counted(self):
    if mode == "forbid":
        raise AssertionError("the probe ran although a verdict was cached")
    probes.append(1)
    original(self)
LlamaClient.verify_schema_enforcement = counted
settings = load_settings(os.devnull, LLAMA_SERVER_URL=url, HSI_PROBE_CACHE_DIR=cache)
resource = build_resources(settings)["llm"]
if home:
    with dg.DagsterInstance.from_config(home) as instance, dg.build_resources({"llm": resource}, instance) as built:
        built.llm.ensure_ready()
else:
    resource.ensure_ready()
print(len(probes))
"""


def run_child(url: str, mode: str, *, cache: Path | None = None, home: Path | None = None) -> int:
    """Probes the child ran (0 or 1); fails the test if the child failed."""
    if home is not None:
        home.mkdir(exist_ok=True)
    args = [url, mode, str(cache or ""), str(home or "")]
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *args], env=dict(os.environ), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stdout.split()[-1])


def instance_folder(home: Path) -> Path:
    return home / "storage" / probe_cache.INSTANCE_FOLDER


@pytest.mark.llm
def test_resources_from_the_same_setting_share_the_verdict(llama_server: RunningLlama, tmp_path: Path) -> None:
    """Two processes whose settings name the same HSI_PROBE_CACHE_DIR: the second skips the probe."""
    cache = tmp_path / "probe"
    assert run_child(llama_server.url, "count", cache=cache) == 1  # probed, then recorded
    [record] = list(cache.glob("*.json"))
    assert json.loads(record.read_text())["key"]["url"] == llama_server.url.rstrip("/")
    assert run_child(llama_server.url, "forbid", cache=cache) == 0  # the probe would have raised


@pytest.mark.llm
def test_runs_of_one_instance_share_the_verdict_in_its_storage(llama_server: RunningLlama, tmp_path: Path) -> None:
    """HSI_PROBE_CACHE_DIR unset: the runs of one Dagster instance share `<storage>/hsi-schema-probe`; a process
    with neither the setting nor an instance shares nothing and probes."""
    home = tmp_path / "home"
    assert run_child(llama_server.url, "count", home=home) == 1
    [record] = list(instance_folder(home).glob("*.json"))
    assert json.loads(record.read_text())["key"]["url"] == llama_server.url.rstrip("/")
    assert run_child(llama_server.url, "forbid", home=home) == 0
    assert run_child(llama_server.url, "count") == 1  # no folder: the instance's verdict is not seen


@pytest.mark.parametrize("setting", [None, "explicit"])
def test_client_folder_from_setting_then_instance(tmp_path: Path, setting: str | None) -> None:
    """The folder every client of the resource gets (router clients included): the setting wins; unset, the run's
    instance storage; unset outside a run, none."""
    explicit = tmp_path / "explicit"
    settings = load_settings(
        os.devnull,
        LLAMA_SERVER_URL="http://127.0.0.1:9,http://127.0.0.1:10",
        HSI_PROBE_CACHE_DIR=str(explicit) if setting else "",
    )
    resource = build_resources(settings)["llm"]
    assert resource.probe_cache_dir == (str(explicit) if setting else None)
    home = tmp_path / "home"
    home.mkdir()
    with dg.DagsterInstance.from_config(str(home)) as instance, dg.build_resources({"llm": resource}, instance) as run:
        router = run.llm.get_router()
        assert router is not None
        assert [c.probe_cache_dir for c in router.clients] == [explicit if setting else instance_folder(home)] * 2
    outside = build_resources(settings)["llm"]
    assert outside.get_client().probe_cache_dir == (explicit if setting else None)
