"""The schema probe's verdict shared across processes (llm/probe_cache.py): on the real embedded server, a second
process skips the probe; the keys, the age limit and unreadable files as plain misses."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hsi_dagster.llm import probe_cache
from hsi_dagster.llm.slots import ServerInfo
from tests.support.llm_fixtures import RunningLlama

llm = pytest.mark.llm

INFO = ServerInfo(slot_context=4096, total_slots=2, model="/m/smollm2.gguf", chat_template=None, build_info="b1-abc")
URL = "http://127.0.0.1:8091"

# One process = one Dagster run: ensure_ready against the server, with the probe counted (or forbidden).
CHILD = """
import sys
from hsi_dagster.llm.client import LlamaClient
probes = []
original = LlamaClient.verify_schema_enforcement
def counted(self):
    if sys.argv[2] == "forbid":
        raise AssertionError("the probe ran although a verdict was cached")
    probes.append(1)
    original(self)
LlamaClient.verify_schema_enforcement = counted
with LlamaClient(sys.argv[1]) as client:
    client.ensure_ready()
print(len(probes))
"""


def run_child(url: str, mode: str, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, probe_cache.DIR_ENV: str(cache)}
    return subprocess.run(
        [sys.executable, "-c", CHILD, url, mode], env=env, capture_output=True, text=True, timeout=120, check=False
    )


@llm
def test_a_second_process_skips_the_probe_on_the_same_server(llama_server: RunningLlama, tmp_path: Path) -> None:
    cache = tmp_path / "probe"
    first = run_child(llama_server.url, "count", cache)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["1"]  # probed, then recorded
    [record] = list(cache.glob("*.json"))
    assert json.loads(record.read_text())["key"]["url"] == llama_server.url.rstrip("/")
    second = run_child(llama_server.url, "forbid", cache)
    assert second.returncode == 0, second.stderr  # the probe would have raised
    assert second.stdout.split() == ["0"]


def test_verdict_is_keyed_by_server_identity(tmp_path: Path) -> None:
    assert not probe_cache.passed(URL, INFO, directory=tmp_path)
    assert probe_cache.record_pass(URL, INFO, directory=tmp_path) is not None
    assert probe_cache.passed(URL, INFO, directory=tmp_path)
    assert probe_cache.passed(URL + "/", INFO, directory=tmp_path)  # the same base URL
    for other in (
        dataclasses.replace(INFO, build_info="b2-def"),  # a new llama-server build
        dataclasses.replace(INFO, model="/m/other.gguf"),
        dataclasses.replace(INFO, total_slots=4),  # restarted with another PARALLEL
    ):
        assert not probe_cache.passed(URL, other, directory=tmp_path)
    assert not probe_cache.passed("http://127.0.0.1:8092", INFO, directory=tmp_path)


def test_server_without_build_info_is_never_cached(tmp_path: Path) -> None:
    unknown = dataclasses.replace(INFO, build_info=None)
    assert probe_cache.record_pass(URL, unknown, directory=tmp_path) is None
    assert not probe_cache.passed(URL, unknown, directory=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_old_or_unreadable_verdicts_are_misses_not_errors(tmp_path: Path) -> None:
    path = probe_cache.record_pass(URL, INFO, directory=tmp_path)
    assert path is not None
    assert not probe_cache.passed(URL, INFO, directory=tmp_path, now=time.time() + probe_cache.MAX_AGE_SECONDS + 1)
    path.write_text("{not json")
    assert not probe_cache.passed(URL, INFO, directory=tmp_path)
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert probe_cache.record_pass(URL, INFO, directory=blocked / "sub") is None  # cannot create the folder


def test_cache_dir_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(probe_cache.DIR_ENV, raising=False)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    assert probe_cache.cache_dir() is None
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    assert probe_cache.cache_dir() == tmp_path / "storage" / "hsi-schema-probe"
    monkeypatch.setenv(probe_cache.DIR_ENV, str(tmp_path / "x"))
    assert probe_cache.cache_dir() == tmp_path / "x"
