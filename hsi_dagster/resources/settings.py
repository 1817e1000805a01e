"""The pipeline's settings inside Dagster: typed fields, configured once with plain values."""

from __future__ import annotations

from typing import Any

import dagster as dg
from pydantic import PrivateAttr

from hsi_dagster.core.context.camera_profiles import CameraProfile
from hsi_dagster.settings import HsiSettings, load_camera_profiles

# Settings that belong to other resources or to processes outside the pipeline's steps and sensors: the llama-server
# process and its connection (`llm`), the database (`duckdb`), the enrichment backend, Frigate's API, the MQTT
# connections and the secrets. The pipeline never reads them from this resource (tests/dagster/
# test_resource_settings.py checks the package's code for it), so they are not carried here; `get()` leaves them at
# their defaults.
NOT_PIPELINE_SETTINGS: frozenset[str] = frozenset(
    {
        "GPU_LAYERS", "FLASH_ATTENTION", "CACHE_TYPE_K", "CACHE_TYPE_V", "CACHE_REUSE", "CACHE_RAM_MIB", "THREADS",
        "PRIO", "BATCH_SIZE", "LLM_HOST", "LLM_PORT", "LLAMA_SERVER_URL", "LLAMA_API_KEY", "MODEL_PATH", "MODEL_ALIAS",
        "N_CPU_MOE", "OVERRIDE_TENSOR", "DRAFT_MODEL_PATH", "MLOCK", "LLM_READ_TIMEOUT_SECONDS",
        "LLM_STARTUP_TIMEOUT_SECONDS", "HSI_SLOT_LEASE_DIR", "HSI_PROBE_CACHE_DIR", "HSI_DUCKDB_PATH",
        "ENRICHMENT_BACKEND", "ENRICHMENT_GATEWAY_URL", "ENRICHMENT_TIMEOUT_SECONDS", "ALERT_WEBHOOK_URL",
        "FRIGATE_URL", "FRIGATE_API_TIMEOUT_SECONDS", "FRIGATE_API_PAGE_SIZE",
        "FRIGATE_API_SETTLE_SECONDS", "FRIGATE_TOPIC_PREFIX", "FRIGATE_BATCH_SIZE", "FRIGATE_BATCH_SECONDS",
        "MQTT_HOST", "MQTT_PORT", "MQTT_USERNAME", "MQTT_PASSWORD", "MQTT_TLS", "MQTT_CA_FILE", "MQTT_CLIENT_ID",
        "MQTT_SESSION_EXPIRY_SECONDS", "MQTT_TOPIC_PREFIX", "MQTT_DISCOVERY_PREFIX", "MQTT_PUBLISH_CLIENT_ID",
        "MQTT_CONNECT_TIMEOUT_SECONDS",
    }
)  # fmt: skip


class PipelineSettingsResource(dg.ConfigurableResource):
    """Batching, ingest bounds, sensors, enrichment, prompt budget, history and evidence rules: the settings the
    pipeline's steps and sensors read, one typed field each (named as the variable in hsi.env, so the Dagster UI
    shows each value with its type). Each is parsed once, by `HsiSettings`, where the code location loads
    (`from_settings`); `get()` rebuilds the same `HsiSettings` from these fields and nothing else: no file, no
    environment, so a run and its sensor see exactly what the UI shows."""

    # Batch windows (contract section 2)
    BATCH_WINDOW_SECONDS: float
    BATCH_IDLE_TIMEOUT_SECONDS: float
    BATCH_TRACK_HOLD_SECONDS: float
    FAST_PATH_LABELS: list[str]
    FAST_PATH_CONFIDENCE: float
    # Ingest bounds (contract section 6)
    INGEST_MAX_LINE_BYTES: int
    INGEST_MAX_LABEL_CHARS: int
    INGEST_MAX_TAG_CHARS: int
    INGEST_MAX_TEXT_CHARS: int
    INGEST_MAX_FLORENCE_REGIONS: int
    INGEST_MAX_CLIP_CLASSES: int
    INGEST_MAX_ENRICHMENT_BYTES: int
    INGEST_MAX_ENRICHMENT_DEPTH: int
    QUARANTINE_RAW_MAX_CHARS: int
    # Sensors, inbox, alerts, retention
    HSI_INBOX_DIR: str
    SENSOR_MAX_BATCHES_PER_TICK: int
    SENSOR_HOLD_SECONDS: float
    INBOX_WRITE_DELAY_SECONDS: float
    INBOX_RETENTION_HOURS: float
    ALERT_COOLDOWN_SECONDS: float
    PARTITION_RETENTION_DAYS: float
    MQTT_PUBLISH: bool
    FRIGATE_WRITEBACK: str
    # The household's corrections (issue 38): the MQTT bound per camera, the exceptions' rule
    CORRECTIONS_PER_CAMERA_PER_HOUR: int
    HOUSEHOLD_EXCEPTION_MIN_CORRECTIONS: int
    HOUSEHOLD_EXCEPTION_DAYS: float
    PROMPT_HOUSEHOLD_EXAMPLES: int
    # Visits (issue 44): linking a batch into one person's way around the house
    VISIT_GAP_SECONDS: float
    VISIT_MAX_SPAN_SECONDS: float
    VISIT_MAX_BATCHES: int
    VISIT_CLOCK_SKEW_SECONDS: float
    # Enrichment, prompt and budget (CTX_SIZE / PARALLEL: the per-slot context when the server cannot be asked)
    ENRICHMENT_QUALITY_LEVEL: str
    CLIP_NOISE_THRESHOLD: float
    CAMERA_CONTEXT_PATH: str | None = None
    FRIGATE_CONFIG_PATH: str | None = None  # its camera groups link visits (core/visits/adjacency.py)
    CTX_SIZE: int
    PARALLEL: int
    NEMOTRON_MAX_OUTPUT_TOKENS: int
    PROMPT_SAFETY_MARGIN_TOKENS: int
    PROMPT_TOKEN_RATIO: float
    ASSESSMENT_SCHEMA: str
    MODEL_TRUST: str  # auto or 0-3, as text (one Dagster type): HsiSettings parses it (core/verdict/trust.py)
    # History (issue 25)
    HISTORY_ENABLED: bool
    HISTORY_DAYS: int
    HISTORY_MIN_DAYS: int
    HISTORY_UNUSUAL_MAX_FRACTION: float
    HISTORY_CROSS_CAMERA_MINUTES: float
    # Evidence floor (issue 24); unset lists = the floor's own defaults
    EVIDENCE_WEAPON_LABELS: list[str] | None = None
    EVIDENCE_TOOL_LABELS: list[str] | None = None
    EVIDENCE_HOSTILE_ACTIONS: list[str] | None = None
    EVIDENCE_PROBING_ACTIONS: list[str] | None = None
    EVIDENCE_VIOLENCE_THRESHOLD: float
    EVIDENCE_VIOLENCE_MIN_FRAMES: int
    EVIDENCE_NIGHT_START_HOUR: int
    EVIDENCE_NIGHT_END_HOUR: int
    EVIDENCE_LOITER_SECONDS: float
    KNOWN_PLATES: list[str] = []

    _settings: HsiSettings | None = PrivateAttr(default=None)

    @classmethod
    def from_settings(cls, settings: HsiSettings) -> PipelineSettingsResource:
        values = settings.model_dump(mode="json", include=set(cls.model_fields))
        values["MODEL_TRUST"] = str(values["MODEL_TRUST"])
        return cls(**values)

    def field_values(self) -> dict[str, Any]:
        """The typed fields by variable name (unset optional ones left out)."""
        return {name: value for name in type(self).model_fields if (value := getattr(self, name)) is not None}

    def get(self) -> HsiSettings:
        """The settings (validated once per resource instance; SettingsError names a bad variable)."""
        if self._settings is None:
            self._settings = HsiSettings.from_values(self.field_values())
        return self._settings

    def camera_profiles(self) -> dict[str, CameraProfile]:
        """The camera profile file (CAMERA_CONTEXT_PATH), read at each call so that edits apply to the next batch;
        {} when unset. CameraProfileError names the file, camera and field."""
        path = self.CAMERA_CONTEXT_PATH
        return load_camera_profiles(path) if path else {}
