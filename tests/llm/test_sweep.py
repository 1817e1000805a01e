"""The llama-server side of `hsi llm sweep` without a server: candidates from --try and TOML, what is refused and
why, the model file's hash and a process's peak memory."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from hsi_dagster.llm.sweep import (
    Candidate,
    CandidateError,
    ServerFacts,
    candidate_settings,
    candidates_from_toml,
    candidates_from_tries,
    candidates_from_urls,
    model_file_facts,
    parse_try,
    peak_rss_bytes,
)
from hsi_dagster.settings import load_settings

BASELINE = load_settings(os.devnull, CTX_SIZE=8192, PARALLEL=1, THREADS=2)


def test_one_candidate_per_value_that_differs_from_the_baseline():
    found = candidates_from_tries(["PARALLEL=1,2", "CACHE_TYPE_K=q8_0", "PARALLEL=2"], BASELINE)
    assert [c.name for c in found] == ["baseline", "PARALLEL=2", "CACHE_TYPE_K=q8_0"]  # PARALLEL=1 is the baseline
    assert found[0].baseline and not found[1].baseline
    assert found[1].overrides == {"PARALLEL": "2"} and found[1].problem is None
    assert candidate_settings(BASELINE, found[1].overrides).PARALLEL == 2


def test_refused_candidates_are_kept_with_the_reason():
    """An unknown setting, one the sweep sets itself, a value the settings refuse, a combination llama-server
    refuses: each becomes a failed candidate (reported; the sweep goes on), never an exception."""
    found = candidates_from_tries(
        ["BOGUS=1", "LLM_PORT=9000", "CACHE_TYPE_K=q3_x", "PARALLEL=0", "CACHE_TYPE_V=q8_0"],
        load_settings(os.devnull, FLASH_ATTENTION=False),
    )
    problems = {c.name: c.problem for c in found[1:]}
    assert problems["BOGUS=1"] == "unknown setting 'BOGUS': not a setting of hsi.env (see hsi.env.example)"
    assert "LLM_PORT is set by the sweep" in problems["LLM_PORT=9000"]
    assert "CACHE_TYPE_K='q3_x' is invalid" in problems["CACHE_TYPE_K=q3_x"]
    assert "PARALLEL='0' is invalid: accepted values are whole numbers >= 1" in problems["PARALLEL=0"]
    assert "CACHE_TYPE_V: q8_0 needs FLASH_ATTENTION=true" in problems["CACHE_TYPE_V=q8_0"]


def test_a_try_that_cannot_be_read_is_a_usage_error():
    assert parse_try(" THREADS = 1, 2 ,") == ("THREADS", ["1", "2"])
    for text in ("PARALLEL", "=1", "PARALLEL="):
        with pytest.raises(CandidateError, match="give NAME=value"):
            parse_try(text)


def test_toml_candidates(tmp_path: Path):
    path = tmp_path / "candidates.toml"
    path.write_text(
        '[[candidate]]\nname = "two slots, q8 K"\nPARALLEL = 2\nCACHE_TYPE_K = "q8_0"\n\n'
        "[[candidate]]\nFLASH_ATTENTION = false\n\n[[candidate]]\nNOPE = 1\n"
    )
    found = candidates_from_toml(path, BASELINE)
    assert [c.name for c in found] == ["baseline", "two slots, q8 K", "FLASH_ATTENTION=false", "NOPE=1"]
    assert found[1].overrides == {"PARALLEL": "2", "CACHE_TYPE_K": "q8_0"} and found[1].problem is None
    assert found[2].problem is None and "unknown setting 'NOPE'" in (found[3].problem or "")
    path.write_text("PARALLEL = [")
    with pytest.raises(CandidateError, match="candidates.toml"):
        candidates_from_toml(path, BASELINE)
    path.write_text("PARALLEL = 2\n")
    with pytest.raises(CandidateError, match=r"no \[\[candidate\]\] tables"):
        candidates_from_toml(path, BASELINE)


def test_external_servers_the_first_is_the_baseline():
    found = candidates_from_urls(["http://127.0.0.1:1", "http://127.0.0.1:2"])
    assert found == [
        Candidate("baseline", url="http://127.0.0.1:1"),
        Candidate("http://127.0.0.1:2", url="http://127.0.0.1:2"),
    ]


def test_model_hash_and_peak_memory(tmp_path: Path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + bytes(range(256)) * 5000)
    facts = ServerFacts(url="http://x")
    model_file_facts(str(model), facts)
    assert facts.model_bytes == model.stat().st_size
    assert facts.model_sha256 == hashlib.sha256(model.read_bytes()).hexdigest()
    elsewhere = ServerFacts(url="http://x")
    model_file_facts("/models/not-on-this-machine.gguf", elsewhere)
    assert elsewhere.model_sha256 is None and elsewhere.model_bytes is None
    peak = peak_rss_bytes(os.getpid())
    assert peak is not None and peak > 10 * 2**20  # this Python process with pytest loaded
    assert peak_rss_bytes(2**22 + 12345) is None  # no such process
