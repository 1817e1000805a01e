"""docker-compose.prod.yml keeps the promises the deployment depends on: nothing listens beyond localhost,
health checks gate start-up, state lives in named volumes, secrets never sit in the file, and the names the
Dagster instance config refers to (network, volumes, image) exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.prod.yml"
SECRET_NAME = re.compile(r"(PASSWORD|SECRET|TOKEN|API_KEY)$")
INTERPOLATION = re.compile(r"^\$\{[A-Z0-9_]+(:?[-?][^}]*)?\}$")
ONE_SHOT = {"dagster-init"}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def instance_config() -> dict:
    return yaml.safe_load((REPO / "deploy/dagster.yaml").read_text())


def _seconds(value: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    return sum(float(n) * units[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", value))


def _environment(service: dict) -> dict:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    return env


def test_every_published_port_is_bound_to_localhost(compose):
    published = []
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            if isinstance(port, dict):
                assert port.get("host_ip") == "127.0.0.1", (name, port)
            else:
                assert str(port).startswith("127.0.0.1:"), (name, port)
            published.append(name)
    assert {"ai-llm", "ai-llm-vllm", "dagster-webserver"} <= set(published)
    assert "ports" not in compose["services"]["postgres"]  # only the compose network reaches it


def test_long_running_services_have_healthchecks_and_restart(compose):
    for name, service in compose["services"].items():
        if name in ONE_SHOT:
            assert service["restart"] == "no"
            continue
        assert service.get("healthcheck", {}).get("test"), name
        assert service["restart"] == "unless-stopped", name


def test_llm_healthcheck_waits_for_model_loading(compose):
    check = compose["services"]["ai-llm"]["healthcheck"]
    assert "http://127.0.0.1:8091/health" in check["test"] and "-f" in " ".join(check["test"])
    assert _seconds(check["start_period"]) >= 120
    assert _seconds(compose["services"]["ai-llm-vllm"]["healthcheck"]["start_period"]) >= 120


def test_llm_service_shape(compose):
    llm = compose["services"]["ai-llm"]
    assert llm["build"]["dockerfile"] == "ai/nemotron/Dockerfile"
    assert ".env" in llm["env_file"]
    env = _environment(llm)
    assert env["LLM_HOST"] == "0.0.0.0" and env["LLM_PORT"] == "8091"
    assert env["MODEL_PATH"].startswith("/models/")
    assert llm["ports"] == ["127.0.0.1:${LLM_PORT:-8091}:8091"]
    models = next(v for v in llm["volumes"] if isinstance(v, dict) and v["target"] == "/models")
    assert models["read_only"] is True
    resources = llm["deploy"]["resources"]
    assert resources["limits"]["cpus"] and resources["limits"]["memory"]
    gpu = resources["reservations"]["devices"][0]
    assert gpu["driver"] == "nvidia" and "gpu" in gpu["capabilities"]
    assert "llama_api_key" in llm["secrets"]
    assert env["LLAMA_API_KEY_FILE"] == "/run/secrets/llama_api_key"


def test_vllm_is_behind_its_profile(compose):
    vllm = compose["services"]["ai-llm-vllm"]
    assert vllm["profiles"] == ["vllm"]
    assert all(str(p).startswith("127.0.0.1:") for p in vllm["ports"])
    assert vllm["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert ":latest" not in vllm["image"]
    behind_profiles = ("ai-llm-vllm", "frigate-listen")
    assert all("profiles" not in s for n, s in compose["services"].items() if n not in behind_profiles)


def test_state_lives_in_named_volumes_with_the_names_the_run_launcher_uses(compose, instance_config):
    declared = compose["volumes"]
    fixed_names = {key: spec["name"] for key, spec in declared.items()}
    used = set()
    for service in compose["services"].values():
        for volume in service.get("volumes", []):
            if isinstance(volume, str) and not volume.startswith(("/", ".")):
                source = volume.split(":", 1)[0]
                assert source in declared, volume
                used.add(source)
    assert used == set(declared)
    assert "dagster-postgres:/var/lib/postgresql/data" in compose["services"]["postgres"]["volumes"]
    assert "hsi-duckdb:/data" in compose["services"]["dagster-code"]["volumes"]
    launcher_volumes = instance_config["run_launcher"]["config"]["container_kwargs"]["volumes"]
    for volume in launcher_volumes:
        assert volume.split(":", 1)[0] in fixed_names.values(), volume
    assert instance_config["run_launcher"]["config"]["network"] == compose["networks"]["hsi"]["name"]


def test_no_secret_is_written_in_the_file(compose):
    for name, service in compose["services"].items():
        for key, value in _environment(service).items():
            if SECRET_NAME.search(key):
                assert value is None or INTERPOLATION.match(str(value)) or str(value).startswith("/run/secrets/"), (
                    name,
                    key,
                )
    assert compose["secrets"]["llama_api_key"]["file"].startswith("${")
    text = COMPOSE.read_text()
    assert not re.search(r"--api-key\s", text)  # the key is only ever passed by file
    literal = re.compile(r"(?i)(password|secret|token|api_key)\w*[ \t]*[:=][ \t]*['\"]?[^\s'\"$/]{6,}")
    assert not literal.search(re.sub(r"\$\{[^}]*\}", "", text))
    assert literal.search("POSTGRES_PASSWORD: hunter2hunter2")  # the check itself bites


def test_dagster_services(compose):
    services = compose["services"]
    code = services["dagster-code"]
    assert code["command"][:3] == ["dagster", "api", "grpc"] and code["command"][-2:] == [
        "-m",
        "hsi_dagster.definitions",
    ]
    assert services["dagster-webserver"]["ports"] == ["127.0.0.1:${DAGSTER_WEBSERVER_PORT:-3000}:3000"]
    assert services["dagster-daemon"]["command"][:2] == ["dagster-daemon", "run"]
    for name in ("dagster-init", "dagster-code", "dagster-webserver", "dagster-daemon"):
        assert services[name]["build"]["dockerfile"] == "deploy/Dockerfile.dagster"
        assert ".env" in services[name]["env_file"]
        assert services[name]["image"] == code["image"]
    # runs are launched from the code server's image
    assert _environment(code)["DAGSTER_CURRENT_IMAGE"] == code["image"]
    # The one-shot set-up is deploy/stack-init.sh (the test stack runs the same): pools from the settings.
    assert services["dagster-init"]["command"] == ["hsi-stack-init", "/run/hsi-src/.env"]
    stack_init = (REPO / "deploy/stack-init.sh").read_text()
    assert "dagster instance migrate" in stack_init and "apply_pool_limits(instance, settings)" in stack_init
    assert services["dagster-code"]["depends_on"]["dagster-init"]["condition"] == "service_completed_successfully"
    assert services["postgres"]["healthcheck"]["test"][1].startswith("pg_isready")


def test_frigate_listener_service(compose):
    """`hsi frigate listen` runs from the project's image behind its profile, health-checked by its status file."""
    listen = compose["services"]["frigate-listen"]
    assert listen["profiles"] == ["frigate"]
    assert listen["command"][:3] == ["hsi", "frigate", "listen"]
    status_file = listen["command"][listen["command"].index("--status-file") + 1]
    check = listen["healthcheck"]["test"]
    assert check[1:4] == ["hsi", "frigate", "status"] and status_file in check
    assert "hsi-duckdb:/data" in listen["volumes"] and listen["image"] == compose["services"]["dagster-code"]["image"]
    assert "ports" not in listen and ".env" in listen["env_file"]


def test_llm_slot_leases_are_shared_by_the_code_server_and_every_run_container(compose, instance_config):
    """Slot leases bound completions across processes only when every process sees one directory (#16 item 4): the
    image sets HSI_SLOT_LEASE_DIR to a directory it owns, and the code server (where `hsi process` runs) and the run
    containers mount one named volume there."""
    dockerfile = (REPO / "deploy/Dockerfile.dagster").read_text()
    match = re.search(r"HSI_SLOT_LEASE_DIR=(\S+)", dockerfile)
    assert match, "deploy/Dockerfile.dagster sets no HSI_SLOT_LEASE_DIR"
    lease_dir = match.group(1)
    assert re.search(rf"mkdir -p [^\n]*{lease_dir}", dockerfile) and re.search(rf"chown [^\n]*{lease_dir}", dockerfile)
    name = compose["volumes"]["hsi-llm-slots"]["name"]
    assert f"hsi-llm-slots:{lease_dir}" in compose["services"]["dagster-code"]["volumes"]
    assert f"{name}:{lease_dir}" in instance_config["run_launcher"]["config"]["container_kwargs"]["volumes"]
