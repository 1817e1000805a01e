"""The production stack on one Docker engine, for tests and benches: the images of docker-compose.prod.yml (built by
tests/support/docker_images.py), the same deploy/dagster.yaml and deploy/workspace.yaml baked into them, one hsi.env.

Services (one container each, on a bridge network the stack creates; nothing published but the webserver, on
127.0.0.1): postgres (Dagster's run, event and schedule storage), the one-shot init (deploy/stack-init.sh, as
compose's dagster-init), two CPU llama-servers (LLAMA_SERVER_URL lists both: the router), the code server
(`dagster api grpc`), dagster-webserver, dagster-daemon (DockerRunLauncher: each run in a container of the same image,
through the engine's socket).

Driven over the docker CLI rather than compose: Debian's docker-compose 1.29 is not installed with docker.io and
cannot read docker-compose.prod.yml (`name:`, GPU device reservations), and the tests kill and restart single
containers and compare the engine's containers with Dagster's runs anyway. Names are the production ones that
deploy/dagster.yaml fixes (network `hsi_network`, volumes `hsi_duckdb`, `hsi_config`, `hsi_dagster_storage`,
`hsi_llm_slots`); everything the stack creates carries the label io.hsi.stack=test, and `up` refuses to start where
those names exist without it (a production stack on the same engine).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from tests.support.docker_images import DockerError, StackImages, docker

NETWORK = "hsi_network"
VOLUMES = ("hsi_duckdb", "hsi_config", "hsi_dagster_storage", "hsi_llm_slots", "hsi_dagster_postgres")
LABEL_KEY, LABEL_VALUE = "io.hsi.stack", "test"
LABEL = f"{LABEL_KEY}={LABEL_VALUE}"
SOCKET = "/var/run/docker.sock"
LLAMA_PORT = 8091
# As docker-compose.prod.yml's dagster-code runs it.
CODE_SERVER_COMMAND = ("dagster", "api", "grpc", "-h", "0.0.0.0", "-p", "4000", "-m", "hsi_dagster.definitions")
_T = TypeVar("_T")


def night_stream_args(seconds: float) -> tuple[str, ...]:
    """`hsi simulate --live` arguments of the stream of record (bench/live_bench.py): the activity of
    2026-12-03T15:00Z played now, 0.5 detections/s on average, for `seconds`."""
    return ("--rate", "0.5", "--seconds", f"{seconds:g}", "--seed", "7", "--activity-start", "2026-12-03T15:00:00Z")


class ServiceFailedToStart(RuntimeError):
    """A container exited (or was restarted by its policy) while it was waited for; not retried by `wait_for`."""


def wait_for(what: str, check: Callable[[], _T | None], timeout: float, interval: float = 0.5) -> _T:
    """Poll `check` until it returns something truthy (an empty list is "not yet"); raise TimeoutError naming
    `what`."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except (DockerError, OSError, ValueError) as exc:
            last_error = exc
        time.sleep(interval)
    raise TimeoutError(f"{what}: not within {timeout:g} s" + (f" (last error: {last_error})" if last_error else ""))


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines as `docker run --env-file` reads them (no quotes, no expansion)."""
    values = {}
    for line in path.read_text().splitlines():
        name, sep, value = line.strip().partition("=")
        if sep and not name.startswith("#"):
            values[name.strip()] = value
    return values


def write_stack_env(path: Path, **extra: str) -> Path:
    """A stack's one hsi.env: Postgres and API secrets, small llama-servers (1 slot of 4096 tokens each)."""
    values = {
        "DAGSTER_PG_USERNAME": "dagster",
        "DAGSTER_PG_PASSWORD": secrets.token_hex(12),
        "DAGSTER_PG_DB": "dagster",
        "LLAMA_API_KEY": secrets.token_hex(16),
        "CTX_SIZE": "4096",
        "PARALLEL": "1",
        "NEMOTRON_MAX_OUTPUT_TOKENS": "256",
        # Shared CI machines: at nice 5 (PRIO=-1) the servers starve behind other jobs and every run waits on them,
        # and a completion on a loaded 2-core box outlasts the default 120 s read timeout (then it is cancelled and
        # retried, again and again: seen here at a load average of 15).
        "PRIO": "0",
        "LLM_READ_TIMEOUT_SECONDS": "900",
        # Two servers on two cores: one compute thread each (two threads that meet at every token lose most under load).
        "THREADS": "1",
        **extra,
    }
    path.write_text("".join(f"{key}={value}\n" for key, value in values.items()))
    return path


@dataclass
class DockerStack:
    images: StackImages
    env_file: Path
    prefix: str = "hsi-test"
    llama_servers: tuple[str, ...] = ("ai-llm-a", "ai-llm-b")
    timings: dict[str, float] = field(default_factory=dict)
    webserver_url: str = ""

    # ------------------------------------------------------------------------------------------------ names
    def name(self, service: str) -> str:
        return f"{self.prefix}-{service}"

    @property
    def llama_urls(self) -> str:
        return ",".join(f"http://{alias}:{LLAMA_PORT}" for alias in self.llama_servers)

    @property
    def services(self) -> tuple[str, ...]:
        """The services that run all along (not the one-shot init, the simulator or the run containers)."""
        return ("postgres", *self.llama_servers, "dagster-code", "dagster-webserver", "dagster-daemon")

    @property
    def settings(self) -> dict[str, str]:
        return read_env_file(self.env_file)

    def _dagster_env(self) -> list[str]:
        """What compose's x-dagster-env sets: container-side values over the hsi.env passed as env-file."""
        values = {
            "DAGSTER_PG_HOST": "postgres",
            "DAGSTER_CURRENT_IMAGE": self.images.dagster,
            "HSI_ENV_FILE": "/run/hsi/hsi.env",
            "HSI_DUCKDB_PATH": "/data/hsi.duckdb",
            "HSI_INBOX_DIR": "/data/inbox",
            "LLAMA_SERVER_URL": self.llama_urls,
        }
        return ["--env-file", str(self.env_file), *(f"--env={k}={v}" for k, v in values.items())]

    def _run(self, service: str, *args: str, detach: bool = True, restart: str = "unless-stopped") -> str:
        flags = ["--detach", f"--restart={restart}"] if detach else ["--rm"]
        return docker(
            "run", *flags, f"--name={self.name(service)}", f"--label={LABEL}", f"--network={NETWORK}",
            f"--network-alias={service}", "--log-opt", "max-size=20m", *args, timeout=300,
        ).strip()  # fmt: skip

    # ------------------------------------------------------------------------------------------------ state
    def running(self, service: str) -> bool:
        return docker("inspect", "--format", "{{.State.Running}}", self.name(service), check=False).strip() == "true"

    def started_at(self, service: str) -> str:
        return docker("inspect", "--format", "{{.State.StartedAt}}", self.name(service)).strip()

    def restart_count(self, service: str) -> int:
        """How often the engine restarted the container by its restart policy (not `docker restart`)."""
        return int(docker("inspect", "--format", "{{.RestartCount}}", self.name(service)).strip())

    def logs(self, service: str, tail: int = 60, since: float | None = None) -> str:
        """The container's last lines (since an epoch time, when given), stdout and stderr together."""
        window = ["--since", f"{since:.3f}"] if since is not None else []
        proc = subprocess.run(
            ["docker", "logs", "--tail", str(tail), *window, self.name(service)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        return proc.stdout + proc.stderr

    def _wait_healthy(self, service: str, timeout: float) -> None:
        """Wait for the health check to pass; fail at once, with the container's log, when it exits or its restart
        policy restarts it meanwhile (a service that fails at start does not become healthy later)."""
        name = self.name(service)
        restarts_at_start = self.restart_count(service)

        def healthy() -> bool:
            health_status = "{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}"
            state = "{{.State.Running}} {{.RestartCount}} " + health_status
            running, restarts, health = docker("inspect", "--format", state, name).split()
            if running != "true" or int(restarts) > restarts_at_start:
                raise ServiceFailedToStart(f"{name} exited during its start:\n{self.logs(service)}")
            return health == "healthy"

        wait_for(f"{name} healthy", healthy, timeout)

    # ------------------------------------------------------------------------------------------------ lifecycle
    def leftovers(self) -> dict[str, list[str]]:
        """Everything of a test stack on the engine: containers (the services and the run containers of its image),
        its network and its volumes."""
        containers = set(docker("ps", "-aq", "--filter", f"label={LABEL}").split())
        containers |= set(docker("ps", "-aq", "--filter", f"ancestor={self.images.dagster}").split())
        networks = docker("network", "ls", "-q", "--filter", f"label={LABEL}").split()
        volumes = docker("volume", "ls", "-q", "--filter", f"label={LABEL}").split()
        return {"containers": sorted(containers), "networks": networks, "volumes": volumes}

    def _refuse_foreign_names(self) -> None:
        for kind, names in (("network", [NETWORK]), ("volume", list(VOLUMES))):
            for name in names:
                labels = docker(kind, "inspect", "--format", "{{json .Labels}}", name, check=False).strip()
                if labels and LABEL_KEY not in (json.loads(labels) or {}):
                    raise DockerError(
                        f"{kind} {name} exists and is not a test stack's: a production stack on this engine? The test "
                        "stack uses the names deploy/dagster.yaml fixes; run it on another engine (DOCKER_HOST)"
                    )

    def down(self) -> dict[str, list[str]]:
        """Remove every container, the network and the volumes; return what is left (empty lists when clean)."""
        left = self.leftovers()
        if left["containers"]:
            docker("rm", "-f", "-v", *left["containers"], timeout=300, check=False)
        for network in left["networks"]:
            docker("network", "rm", network, check=False)
        if left["volumes"]:
            docker("volume", "rm", "-f", *left["volumes"], check=False)
        return self.leftovers()

    def up(self, timeout: float = 300) -> dict[str, float]:
        """Start every service in dependency order, each waited for; returns seconds per step."""
        self._refuse_foreign_names()
        self.down()
        started = time.monotonic()
        docker("network", "create", f"--label={LABEL}", NETWORK)
        for volume in VOLUMES:
            docker("volume", "create", f"--label={LABEL}", volume)
        settings = self.settings
        step = time.monotonic()
        self._run(
            "postgres", "--env", f"POSTGRES_USER={settings.get('DAGSTER_PG_USERNAME', 'dagster')}",
            "--env", f"POSTGRES_PASSWORD={settings.get('DAGSTER_PG_PASSWORD', '')}",
            "--env", f"POSTGRES_DB={settings.get('DAGSTER_PG_DB', 'dagster')}",
            "--volume", "hsi_dagster_postgres:/var/lib/postgresql/data", self.images.postgres,
        )  # fmt: skip
        self._wait_healthy("postgres", timeout)
        self.timings["postgres"] = time.monotonic() - step
        step = time.monotonic()
        self._run(
            "init", *self._dagster_env(), "--env=HSI_ENV_FILE=/run/hsi-src/hsi.env", "--user=0:0",
            f"--volume={self.env_file.resolve()}:/run/hsi-src/hsi.env:ro", "--volume=hsi_config:/run/hsi",
            self.images.dagster, "hsi-stack-init", "/run/hsi-src/hsi.env", detach=False,
        )  # fmt: skip
        self.timings["init (settings, migrate, pools)"] = time.monotonic() - step
        step = time.monotonic()
        for alias in self.llama_servers:
            self.start_llama(alias)
        for alias in self.llama_servers:
            self._wait_healthy(alias, timeout)
        self.timings["llama-servers"] = time.monotonic() - step
        step = time.monotonic()
        self._run(
            "dagster-code", *self._dagster_env(), "--volume=hsi_duckdb:/data", "--volume=hsi_config:/run/hsi:ro",
            "--volume=hsi_dagster_storage:/opt/dagster/dagster_home/storage", "--volume=hsi_llm_slots:/run/hsi-slots",
            "--health-cmd=dagster api grpc-health-check -p 4000", "--health-interval=2s", "--health-retries=60",
            self.images.dagster, *CODE_SERVER_COMMAND,
        )  # fmt: skip
        self._wait_healthy("dagster-code", timeout)
        self.timings["code server"] = time.monotonic() - step
        step = time.monotonic()
        socket_gid = str(os.stat(SOCKET).st_gid)
        workspace = "/opt/dagster/dagster_home/workspace.yaml"
        self._run(
            "dagster-webserver", *self._dagster_env(), "--publish=127.0.0.1::3000", f"--volume={SOCKET}:{SOCKET}",
            f"--group-add={socket_gid}", "--volume=hsi_config:/run/hsi:ro",
            "--volume=hsi_dagster_storage:/opt/dagster/dagster_home/storage",
            self.images.dagster, "dagster-webserver", "-h", "0.0.0.0", "-p", "3000", "-w", workspace,
        )  # fmt: skip
        self._run(
            "dagster-daemon", *self._dagster_env(), f"--volume={SOCKET}:{SOCKET}", f"--group-add={socket_gid}",
            "--volume=hsi_config:/run/hsi:ro", "--volume=hsi_dagster_storage:/opt/dagster/dagster_home/storage",
            self.images.dagster, "dagster-daemon", "run", "-w", workspace,
        )  # fmt: skip
        port = docker("port", self.name("dagster-webserver"), "3000/tcp").split()[0].rsplit(":", 1)[1]
        self.webserver_url = f"http://127.0.0.1:{port}"
        wait_for("webserver answers /server_info", lambda: self._http_ok("/server_info"), timeout)
        wait_for("daemon healthy (sensors, run queue)", self.daemon_healthy, timeout)
        self.timings["webserver + daemon"] = time.monotonic() - step
        self.timings["total"] = time.monotonic() - started
        return self.timings

    def start_llama(self, alias: str) -> None:
        self._run(
            alias, "--env-file", str(self.env_file), "--env=HSI_ENV_FILE=/run/hsi/hsi.env", "--group-add=10002",
            "--volume=hsi_config:/run/hsi:ro", self.images.llama, restart="no",
        )  # fmt: skip

    def kill(self, service: str) -> None:
        docker("kill", self.name(service))

    def stop(self, service: str) -> None:
        """`docker stop`: SIGTERM, then SIGKILL after 20 s; the restart policy leaves a stopped container alone."""
        docker("stop", "--time", "20", self.name(service), timeout=120)

    def start(self, service: str) -> None:
        docker("start", self.name(service), timeout=120)

    def wait_healthy(self, service: str, timeout: float) -> None:
        self._wait_healthy(service, timeout)

    def restart(self, service: str) -> None:
        docker("restart", "--time", "20", self.name(service), timeout=120)

    # ------------------------------------------------------------------------------------------------ webserver
    def _http_ok(self, path: str) -> bool:
        try:
            with urllib.request.urlopen(self.webserver_url + path, timeout=5) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def graphql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(
            self.webserver_url + "/graphql", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            payload = json.loads(response.read())
        if payload.get("errors"):
            raise ValueError(f"GraphQL errors: {payload['errors']}")
        return payload["data"]

    def daemon_healthy(self) -> bool:
        data = self.graphql("{ instance { daemonHealth { allDaemonStatuses { daemonType healthy required } } } }")
        statuses = data["instance"]["daemonHealth"]["allDaemonStatuses"]
        wanted = {"SENSOR", "QUEUED_RUN_COORDINATOR"}
        return wanted <= {s["daemonType"] for s in statuses if s["healthy"]}

    def runs(self) -> list[dict[str, Any]]:
        """Every run the webserver knows: id, job, status, tags (dict), times."""
        data = self.graphql(
            "{ runsOrError(limit: 1000) { __typename ... on Runs { results { runId jobName status creationTime "
            "startTime endTime tags { key value } } } } }"
        )
        runs = data["runsOrError"]["results"]
        for run in runs:
            run["tags"] = {tag["key"]: tag["value"] for tag in run["tags"]}
        return runs

    def batch_runs(self) -> list[dict[str, Any]]:
        """The runs of batch windows (the hourly risk_timeline run has a partition too: a day)."""
        return [run for run in self.runs() if run["jobName"] == "batch_pipeline"]

    def run_events(self, run_id: str) -> list[dict[str, Any]]:
        data = self.graphql(
            "query($id: ID!) { runOrError(runId: $id) { ... on Run { eventConnection(afterCursor: null) { events { "
            "__typename ... on MessageEvent { timestamp message } } } } } }",
            {"id": run_id},
        )
        return data["runOrError"]["eventConnection"]["events"]

    # ------------------------------------------------------------------------------------------------ engine & data
    def run_containers(self) -> dict[str, str]:
        """run id -> container id, for every container the engine has with DockerRunLauncher's label."""
        return {run_id: containers[-1] for run_id, containers in self.run_workers().items()}

    def run_workers(self) -> dict[str, list[str]]:
        """run id -> its containers, oldest first (more than one: the run was resumed in a new container)."""
        ids = docker("ps", "-aq", "--no-trunc", "--filter", "label=dagster/run_id").split()
        if not ids:
            return {}
        fields = '{{.Created}} {{.Id}} {{index .Config.Labels "dagster/run_id"}}'
        workers: dict[str, list[str]] = {}
        for _, container, run_id in sorted(
            line.split() for line in docker("inspect", "--format", fields, *ids).splitlines()
        ):
            workers.setdefault(run_id, []).append(container)
        return workers

    def in_image(self, *command: str, volumes: tuple[str, ...] = ("hsi_duckdb:/data:ro",), timeout: float = 120) -> str:
        """A one-shot container of the Dagster image on the stack's volumes (no network); returns its stdout."""
        mounts = [f"--volume={volume}" for volume in (*volumes, "hsi_config:/run/hsi:ro")]
        return docker(
            "run", "--rm", f"--label={LABEL}", "--network=none", "--env-file", str(self.env_file),
            "--env=HSI_DUCKDB_PATH=/data/hsi.duckdb", *mounts, self.images.dagster, *command, timeout=timeout,
        )  # fmt: skip

    def duckdb_rows(self, sql: str) -> list[list[Any]]:
        """Rows of a read-only query on the stack's DuckDB file (waits out a writer's lock like every reader)."""
        script = (
            "import json, sys\nfrom hsi_dagster.storage.db import connect\n"
            "with connect('/data/hsi.duckdb', read_only=True) as conn:\n"
            "    print(json.dumps(conn.execute(sys.argv[1]).fetchall(), default=str))\n"
        )
        return json.loads(self.in_image("python3", "-c", script, sql))

    def llama_prompt_tokens(self, alias: str) -> float:
        """llama-server's own count of prompt tokens processed (its /metrics, asked inside its container)."""
        script = (
            "import os, urllib.request\n"
            "request = urllib.request.Request('http://127.0.0.1:8091/metrics', "
            "headers={'Authorization': 'Bearer ' + os.environ['LLAMA_API_KEY']})\n"
            "print(urllib.request.urlopen(request, timeout=10).read().decode())\n"
        )
        text = docker("exec", self.name(alias), "python3", "-c", script)
        counter = "llamacpp:prompt_tokens_total"
        return next(float(line.split()[-1]) for line in text.splitlines() if line.startswith(counter))

    def expected_windows(self, into: Path) -> tuple[list[Any], int]:
        """The windows of the stream's files, computed here from the files (core/batching), and their detections."""
        from hsi_dagster.core.intake.batching import BatchRules, DetectionRef, assign_batches
        from hsi_dagster.settings import load_settings

        records = [
            json.loads(line) for path in self.copy_inbox(into) for line in path.read_text().splitlines() if line.strip()
        ]
        refs = [
            DetectionRef(
                r["detection_id"], r["camera_id"],
                datetime.fromisoformat(r["ts"].replace("Z", "+00:00")).astimezone(UTC), r["label"],
                float(r["confidence"]),
            )
            for r in records
        ]  # fmt: skip
        rules = BatchRules.from_settings(load_settings(env_file=self.env_file))
        return assign_batches(refs, rules), len(records)

    def wait_all_assessed(self, batch_ids: set[str], timeout: float) -> None:
        """Until every batch has its risk_assessments row and no run is queued or in flight."""

        state: dict[str, Any] = {}

        def done() -> bool:
            stored = {row[0] for row in self.duckdb_rows("SELECT batch_id FROM risk_assessments")}
            statuses = [run["status"] for run in self.runs()]
            state.update(missing=sorted(batch_ids - stored), runs=dict(Counter(statuses)))
            in_flight = [status for status in statuses if status in ("QUEUED", "NOT_STARTED", "STARTING", "STARTED")]
            return batch_ids <= stored and not in_flight

        try:
            wait_for("every window assessed and no run in flight", done, timeout=timeout, interval=5)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; not assessed: {state.get('missing')}; runs: {state.get('runs')}") from None

    def assessed_exactly_once(self, expected_ids: set[str], detections: int) -> list[list[Any]]:
        """Check the night's outcome: every detection stored, each closed window one risk_assessments row (none for
        anything else, none rejected) and exactly one successful batch run. Returns the rows (batch_id, status,
        assessed_at epoch, latency_ms); raises AssertionError naming what is off."""
        rows = self.duckdb_rows("SELECT batch_id, status, epoch(assessed_at), latency_ms FROM risk_assessments")
        stored = Counter(row[0] for row in rows)
        if set(stored) != expected_ids or set(stored.values()) != {1}:
            raise AssertionError(
                f"risk_assessments: missing {sorted(expected_ids - set(stored))}, unexpected "
                f"{sorted(set(stored) - expected_ids)}, duplicated {sorted(k for k, n in stored.items() if n > 1)}"
            )
        statuses = Counter(row[1] for row in rows)
        print(f"assessment statuses: {dict(statuses)}")
        if "llm_rejected" in statuses:
            raise AssertionError(f"windows the LLM's replies were rejected for: {dict(statuses)}")
        stored_detections = self.duckdb_rows("SELECT count(*) FROM detections")[0][0]
        if stored_detections != detections:
            raise AssertionError(f"{stored_detections} detections stored, {detections} streamed")
        runs = self.batch_runs()
        successes = Counter(run["tags"]["dagster/partition"] for run in runs if run["status"] == "SUCCESS")
        if set(successes) != expected_ids or set(successes.values()) != {1}:
            odd = [run for run in runs if successes[run["tags"]["dagster/partition"]] != 1]
            raise AssertionError(
                f"successful batch runs per window: {dict(successes)}; expected one each. The other windows' runs:\n"
                + "\n".join(self.describe_run(run) for run in odd)
            )
        return rows

    def describe_run(self, run: dict[str, Any]) -> str:
        """A run's window, status, its last event messages and the daemon's last lines about it: what a failed test
        needs to say why."""
        messages = [event.get("message", "") for event in self.run_events(run["runId"])][-6:]
        daemon = [line for line in self.logs("dagster-daemon", tail=20000).splitlines() if run["runId"] in line][-8:]
        return f"{run['runId'][:8]} {run['tags'].get('dagster/partition')} {run['status']}:\n  " + "\n  ".join(
            line[:300] for line in [*messages, "daemon:", *daemon] if line
        )

    def inbox_waiting(self) -> set[str]:
        """Files in the inbox not loaded yet (loaded ones move to .processed/), as the code server sees them."""
        listing = docker("exec", self.name("dagster-code"), "find", "/data/inbox", "-maxdepth", "1", "-name", "*.jsonl")
        return {Path(line).name for line in listing.split() if not Path(line).name.startswith(".")}

    def launch_run(self, job: str) -> str:
        """Submit a run of `job` as the UI's Launch button does (through the queue, the daemon, DockerRunLauncher)."""
        data = self.graphql(
            "mutation($p: ExecutionParams!) { launchRun(executionParams: $p) { __typename "
            "... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }",
            {"p": {"selector": {"repositoryLocationName": "hsi_dagster", "repositoryName": "__repository__",
                                "jobName": job}, "runConfigData": {}}},
        )  # fmt: skip
        result = data["launchRun"]
        if result["__typename"] != "LaunchRunSuccess":
            raise ValueError(f"launchRun {job}: {result}")
        return result["run"]["runId"]

    def stream(self, *args: str) -> None:
        """`hsi simulate --live` into the inbox on the volume, in a container of the same image (detached)."""
        docker(
            "run", "--detach", f"--name={self.name('simulator')}", f"--label={LABEL}", "--network=none",
            "--env-file", str(self.env_file), "--volume=hsi_duckdb:/data", "--volume=hsi_config:/run/hsi:ro",
            self.images.dagster, "hsi", "simulate", "--live", "--inbox", "/data/inbox", *args,
        )  # fmt: skip

    def copy_inbox(self, into: Path) -> list[Path]:
        """The stream's files, out of the volume (loaded or not)."""
        into.mkdir(parents=True, exist_ok=True)
        container = docker("create", f"--label={LABEL}", "--volume=hsi_duckdb:/data", self.images.dagster).strip()
        try:
            docker("cp", f"{container}:/data/inbox/.", str(into))
        finally:
            docker("rm", "-f", container, check=False)
        # Loaded files are moved to <inbox>/.processed/ (hsi_dagster/sensors/inbox_archive.py).
        files = [*into.glob("*.jsonl"), *into.glob(".processed/*.jsonl")]
        return sorted((path for path in files if not path.name.startswith(".")), key=lambda path: path.name)


@contextlib.contextmanager
def running_stack(stack: DockerStack, timeout: float = 300) -> Iterator[DockerStack]:
    """`up`, then `down` whatever happens (logs of every service printed when `up` failed)."""
    try:
        stack.up(timeout)
        yield stack
    except Exception:
        for service in stack.services:
            with contextlib.suppress(DockerError, OSError):
                print(f"--- {stack.name(service)}\n{stack.logs(service)}")
        raise
    finally:
        stack.down()
