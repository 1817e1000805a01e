"""The schema probe's verdict shared across processes (llm/probe_cache.py): the keys, the age limit, unreadable files
as plain misses, no folder as no sharing, one prober at a time. Two processes on the real server, with the folder
from HSI_PROBE_CACHE_DIR or the Dagster instance: tests/dagster/test_probe_cache_resource.py."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path

from hsi_dagster.llm import probe_cache
from hsi_dagster.llm.client import LlamaClient
from hsi_dagster.llm.slots import ServerInfo
from tests.support.fake_llama import FakeLlama, Reply

INFO = ServerInfo(slot_context=4096, total_slots=2, model="/m/smollm2.gguf", chat_template=None, build_info="b1-abc")
URL = "http://127.0.0.1:8091"


def test_verdict_is_keyed_by_server_identity(tmp_path: Path) -> None:
    assert not probe_cache.passed(URL, INFO, tmp_path)
    assert probe_cache.record_pass(URL, INFO, tmp_path) is not None
    assert probe_cache.passed(URL, INFO, tmp_path)
    assert probe_cache.passed(URL + "/", INFO, tmp_path)  # the same base URL
    for other in (
        dataclasses.replace(INFO, build_info="b2-def"),  # a new llama-server build
        dataclasses.replace(INFO, model="/m/other.gguf"),
        dataclasses.replace(INFO, total_slots=4),  # restarted with another PARALLEL
    ):
        assert not probe_cache.passed(URL, other, tmp_path)
    assert not probe_cache.passed("http://127.0.0.1:8092", INFO, tmp_path)


def test_server_without_build_info_is_never_cached(tmp_path: Path) -> None:
    unknown = dataclasses.replace(INFO, build_info=None)
    assert probe_cache.record_pass(URL, unknown, tmp_path) is None
    assert not probe_cache.passed(URL, unknown, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_old_or_unreadable_verdicts_are_misses_not_errors(tmp_path: Path) -> None:
    path = probe_cache.record_pass(URL, INFO, tmp_path)
    assert path is not None
    assert not probe_cache.passed(URL, INFO, tmp_path, now=time.time() + probe_cache.MAX_AGE_SECONDS + 1)
    path.write_text("{not json")
    assert not probe_cache.passed(URL, INFO, tmp_path)
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert probe_cache.record_pass(URL, INFO, blocked / "sub") is None  # cannot create the folder


def test_no_folder_means_nothing_is_shared() -> None:
    """probe_cache_dir None (no setting, no Dagster instance): every process probes, nothing is written."""
    assert probe_cache.record_pass(URL, INFO, None) is None
    assert not probe_cache.passed(URL, INFO, None)
    with LlamaClient(URL) as client:
        assert client.probe_cache_dir is None
    with LlamaClient(URL, probe_cache_dir="/srv/probe") as client:
        assert client.probe_cache_dir == Path("/srv/probe")


def test_processes_starting_together_probe_the_server_once(tmp_path: Path) -> None:
    """FAKE server (fault injection: a probe answered after 3 s, as on a loaded server). Three processes sharing the
    folder become ready at the same moment (a burst of runs on a fresh server): one probes, the others wait for its
    verdict instead of sending probes of their own."""
    fake = FakeLlama().start()
    fake.script("/v1/chat/completions", Reply(delay=3.0))
    ready = (
        "import sys\n"
        "from hsi_dagster.llm.client import LlamaClient\n"
        "with LlamaClient(sys.argv[1], probe_cache_dir=sys.argv[2]) as client:\n"
        "    client.ensure_ready()\n"
    )
    try:
        processes = [
            subprocess.Popen([sys.executable, "-c", ready, fake.url, str(tmp_path / "verdicts")]) for _ in range(3)
        ]
        assert [p.wait(60) for p in processes] == [0, 0, 0]
        assert fake.count("/v1/chat/completions") == 1
    finally:
        fake.stop()
