"""`hsi llm serve --host H --port N`: the flags reach the server's options, as `hsi metrics serve` takes them.

The server itself is replaced by a recorder here: what is under test is the argument path into
`LlamaServerOptions` (the real server binding those options is covered in tests/llm)."""

from __future__ import annotations

import os

import pytest

import hsi_dagster.llm.embedded as embedded
from hsi_dagster.cli.main import main
from hsi_dagster.llm.options import LlamaServerOptions


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[LlamaServerOptions]:
    seen: list[LlamaServerOptions] = []
    monkeypatch.setenv("HSI_ENV_FILE", os.devnull)
    for name in ("LLM_HOST", "LLM_PORT"):  # set, then delete: monkeypatch restores what the command exports
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setattr(
        embedded, "serve", lambda settings, **_: seen.append(LlamaServerOptions.from_settings(settings))
    )
    return seen


def test_flags_reach_the_server_options(served: list[LlamaServerOptions]) -> None:
    assert main(["llm", "serve", "--host", "0.0.0.0", "--port", "18123"]) == 0
    assert (served[0].host, served[0].port) == ("0.0.0.0", 18123)


def test_defaults_are_loopback_and_llm_port(served: list[LlamaServerOptions], monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["llm", "serve"]) == 0
    assert (served[0].host, served[0].port) == ("127.0.0.1", 8091)
    monkeypatch.setenv("LLM_PORT", "18124")
    assert main(["llm", "serve"]) == 0
    assert (served[1].host, served[1].port) == ("127.0.0.1", 18124)


def test_a_port_out_of_range_is_refused(served: list[LlamaServerOptions], capsys: pytest.CaptureFixture) -> None:
    assert main(["llm", "serve", "--port", "70000"]) == 2
    assert "LLM_PORT" in capsys.readouterr().err
    assert served == []
