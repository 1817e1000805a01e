"""The llama-server side of `hsi serve-bench`: candidate configurations, one server per candidate, what it reports.

- Candidates: the baseline (the settings as hsi.env and the environment give them) and, per `--try NAME=v1,v2`,
  one candidate per value that differs from the baseline (one setting changed at a time), or the entries of a small
  TOML file (`[[candidate]]` tables of settings, each with an optional `name`), or several external servers.
  A candidate whose setting is unknown, set by the sweep itself, or refused by the settings is kept as a failed
  candidate with the reason: it is reported, and the sweep goes on.
- `CandidateServer` starts the embedded llama.cpp server (`python -m hsi_dagster.llm.embedded`, what
  `hsi llm serve` runs) with the candidate's settings over the same settings file, and always stops it; a server
  that does not start fails its candidate with its own last log lines. An external URL is measured as it is.
- `ServerFacts`: what the server says about itself (/props: slots, per-slot context, build, model path, model
  type), the flags production would pass for the candidate (llm/argv.py), the model file's size and SHA-256, and
  the server process's peak resident memory (VmHWM from /proc: the kernel's own high-water mark, no sampling).
No Dagster here: the CLI runs the project's prompts on each server (hsi_dagster/cli/serve_bench.py).
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hsi_dagster.llm.argv import build_argv
from hsi_dagster.llm.client import LlamaClient
from hsi_dagster.llm.embedded import EmbeddedServerError, EmbeddedServerProcess
from hsi_dagster.llm.errors import LlamaServerError
from hsi_dagster.llm.options import LlamaServerOptions
from hsi_dagster.settings import HsiSettings, SettingsError, load_settings

# Settings the sweep decides itself for each server it starts: a candidate cannot set them.
SWEEP_OWNED = frozenset({"LLM_HOST", "LLM_PORT", "LLAMA_SERVER_URL"})
LOG_LINES = 12  # of a server that did not start: its own last lines are the reason


class CandidateError(ValueError):
    """A `--try` or TOML entry that cannot be read at all (not NAME=v1,v2; not TOML): a usage error."""


@dataclass(frozen=True)
class Candidate:
    """One configuration to measure: settings over the baseline's, or an external server's URL."""

    name: str
    overrides: Mapping[str, str] = field(default_factory=dict)
    url: str | None = None  # an external server: measured as it is, nothing started
    problem: str | None = None  # refused before any server started (unknown setting, bad value)

    @property
    def baseline(self) -> bool:
        return not self.overrides and self.url is None


def parse_try(text: str) -> tuple[str, list[str]]:
    """`NAME=v1,v2` -> (NAME, [v1, v2])."""
    name, sep, values = text.partition("=")
    name = name.strip()
    parts = [value.strip() for value in values.split(",") if value.strip()]
    if not sep or not name or not parts:
        raise CandidateError(f"--try {text!r}: give NAME=value[,value...], e.g. --try PARALLEL=1,2")
    return name, parts


def candidates_from_tries(tries: Sequence[str], baseline: HsiSettings) -> list[Candidate]:
    """The baseline, then one candidate per value of each `--try` that differs from the baseline's value."""
    found = [Candidate("baseline")]
    seen: set[tuple[str, str]] = set()
    for text in tries:
        name, values = parse_try(text)
        for value in values:
            if (name, value) in seen:
                continue
            seen.add((name, value))
            candidate = Candidate(f"{name}={value}", {name: value})
            problem = refusal(candidate.overrides, baseline)
            if problem is None and _same_as_baseline(name, value, baseline):
                continue  # the baseline measures it already
            found.append(Candidate(candidate.name, candidate.overrides, problem=problem))
    return found


def candidates_from_toml(path: str | os.PathLike[str], baseline: HsiSettings) -> list[Candidate]:
    """The baseline, then each `[[candidate]]` table of the file: settings as keys, an optional `name`."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CandidateError(f"{path}: {exc}") from None
    tables = data.get("candidate")
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
        raise CandidateError(
            f'{path}: no [[candidate]] tables (e.g. [[candidate]] name = "q8 K" CACHE_TYPE_K = "q8_0")'
        )
    found = [Candidate("baseline")]
    for number, table in enumerate(tables, start=1):
        overrides = {key: _toml_value(value) for key, value in table.items() if key != "name"}
        name = str(table.get("name") or ", ".join(f"{k}={v}" for k, v in overrides.items()) or f"candidate {number}")
        problem = refusal(overrides, baseline) if overrides else "no settings given"
        found.append(Candidate(name, overrides, problem=problem))
    return found


def candidates_from_urls(urls: Sequence[str]) -> list[Candidate]:
    """External servers, the first one the baseline."""
    return [Candidate("baseline" if i == 0 else url, url=url) for i, url in enumerate(urls)]


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _same_as_baseline(name: str, value: str, baseline: HsiSettings) -> bool:
    try:
        return candidate_settings(baseline, {name: value}).model_dump() == baseline.model_dump()
    except SettingsError:
        return False


def refusal(overrides: Mapping[str, str], baseline: HsiSettings) -> str | None:
    """Why these overrides cannot make a candidate (None: they can): an unknown setting, one the sweep sets
    itself, or a value the settings refuse (their own message, naming the variable)."""
    for name in overrides:
        if name in SWEEP_OWNED:
            return f"{name} is set by the sweep for each server it starts; it cannot be tried"
        if name not in HsiSettings.model_fields:
            return f"unknown setting {name!r}: not a setting of hsi.env (see hsi.env.example)"
    try:
        settings = candidate_settings(baseline, overrides)
        LlamaServerOptions.from_settings(settings).check()
    except SettingsError as exc:
        return str(exc)
    return None


def candidate_settings(baseline: HsiSettings, overrides: Mapping[str, str]) -> HsiSettings:
    """The baseline's values with `overrides` on top, validated as the settings validate hsi.env."""
    values = {name: getattr(baseline, name) for name in HsiSettings.model_fields}
    values = {name: value for name, value in values.items() if value is not None}
    for secret in ("LLAMA_API_KEY", "ALERT_WEBHOOK_URL"):
        if values.get(secret) is not None:
            values[secret] = values[secret].get_secret_value()
    return HsiSettings.from_values({**values, **overrides})


# ----------------------------------------------------------------------------------------------- facts
@dataclass
class ServerFacts:
    """What one candidate's server is: as it reports itself, as production would start it, and its memory."""

    url: str
    build_info: str | None = None
    model_alias: str | None = None
    model_path: str | None = None
    model_type: str | None = None  # /props model_ftype, e.g. Q4_1
    total_slots: int | None = None
    slot_context: int | None = None
    speculative: str | None = None  # /props default_generation_settings.params["speculative.types"]
    argv: list[str] = field(default_factory=list)  # the production llama-server flags for the candidate
    model_bytes: int | None = None
    model_sha256: str | None = None  # None: the file is not on this machine
    peak_rss_bytes: int | None = None  # None: not a process of this machine (an external server)
    pid: int | None = None


def read_props(client: LlamaClient, facts: ServerFacts) -> None:
    """Fill `facts` from GET /props (a server without it keeps the gaps)."""
    try:
        props = client.props()
    except LlamaServerError:
        return
    settings = props.get("default_generation_settings") or {}
    params = settings.get("params") or {}
    facts.build_info = props.get("build_info")
    facts.model_alias = props.get("model_alias")
    facts.model_path = props.get("model_path")
    facts.model_type = props.get("model_ftype")
    facts.total_slots = props.get("total_slots")
    facts.slot_context = settings.get("n_ctx")
    facts.speculative = params.get("speculative.types")


_HASHES: dict[tuple[str, int, int], str] = {}


def model_file_facts(path: str | None, facts: ServerFacts) -> None:
    """Size and SHA-256 of the model file when it is on this machine (hashed once per file per process)."""
    if not path:
        return
    file = Path(path)
    try:
        stat = file.stat()
    except OSError:
        return
    key = (str(file.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _HASHES:
        digest = hashlib.sha256()
        with open(file, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        _HASHES[key] = digest.hexdigest()
    facts.model_bytes = stat.st_size
    facts.model_sha256 = _HASHES[key]


def peak_rss_bytes(pid: int) -> int | None:
    """The process's peak resident set size (VmHWM in /proc/PID/status), None when it cannot be read."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


# ----------------------------------------------------------------------------------------------- servers
class CandidateFailed(RuntimeError):
    """The candidate's server could not be used; the message is the reason (with its last log lines)."""


@dataclass
class CandidateServer:
    """A running server for one candidate: `url`, `facts`, `settings` (what the client and the prompts use)."""

    candidate: Candidate
    settings: HsiSettings
    url: str
    facts: ServerFacts
    process: EmbeddedServerProcess | None = None

    def refresh_memory(self) -> None:
        if self.process is not None and self.process.pid is not None:
            self.facts.peak_rss_bytes = peak_rss_bytes(self.process.pid) or self.facts.peak_rss_bytes


@contextmanager
def candidate_server(
    candidate: Candidate,
    baseline: HsiSettings,
    *,
    env_file: str | None,
    log_dir: Path,
    startup_timeout: float,
) -> Iterator[CandidateServer]:
    """Start the candidate's embedded server (or meet its external one), yield it, and always stop what was
    started. CandidateFailed with the reason when it does not start or answer."""
    if candidate.problem is not None:
        raise CandidateFailed(candidate.problem)
    if candidate.url is not None:
        facts = ServerFacts(url=candidate.url)
        with LlamaClient(candidate.url, api_key=baseline.api_key, startup_timeout=startup_timeout) as client:
            try:
                client.wait_until_ready()
            except LlamaServerError as exc:
                raise CandidateFailed(str(exc)) from None
            read_props(client, facts)
        model_file_facts(facts.model_path, facts)
        yield CandidateServer(candidate, baseline, candidate.url, facts)
        return
    settings = candidate_settings(baseline, candidate.overrides)
    process = EmbeddedServerProcess(
        dict(candidate.overrides),
        log_path=log_dir / f"llama-server-{_file_name(candidate.name)}.log",
        startup_timeout=startup_timeout,
        env_file=env_file,
    )
    settings = candidate_settings(settings, {"LLM_PORT": str(process.port), "LLAMA_SERVER_URL": process.url})
    try:
        try:
            process.start()
        except EmbeddedServerError:
            raise CandidateFailed(_start_failure(process)) from None
        facts = ServerFacts(url=process.url, pid=process.pid)
        facts.argv = build_argv(LlamaServerOptions.from_settings(settings))
        with LlamaClient(process.url, api_key=settings.api_key, startup_timeout=startup_timeout) as client:
            read_props(client, facts)
        model_file_facts(facts.model_path or str(LlamaServerOptions.from_settings(settings).model_path), facts)
        server = CandidateServer(candidate, settings, process.url, facts, process)
        server.refresh_memory()
        yield server
        server.refresh_memory()
    finally:
        process.stop()


def _start_failure(process: EmbeddedServerProcess) -> str:
    """The server's own last log lines (llama.cpp's reason, e.g. an unreadable model or too little memory)."""
    tail = [line for line in process.log_tail(LOG_LINES * 3).splitlines() if line.strip()][-LOG_LINES:]
    code = process.stop()
    how = f"exited with code {code}" if code is not None else "did not start"
    return f"the server {how}; its last log lines: " + " | ".join(tail) if tail else f"the server {how} (no log)"


def _file_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:60] or "candidate"


def load_baseline(env_file: str | None) -> HsiSettings:
    """The settings as production reads them: `env_file` (else HSI_ENV_FILE, else hsi.env) and the environment."""
    return load_settings(env_file)
