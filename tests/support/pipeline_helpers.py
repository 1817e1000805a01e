"""Helpers shared by the Dagster-layer tests: detection records, resources on temp files, running sensor requests."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta

import dagster as dg

from hsi_dagster.resources import (
    AlertWebhookResource,
    HsiDuckDBResource,
    InlineEnrichmentResource,
    LlamaServerResource,
    PipelineSettingsResource,
)
from hsi_dagster.settings import load_settings
from hsi_dagster.steps import configured_slot_context


def detection(
    detection_id: str, camera_id: str, ts: datetime, label: str = "car", confidence: float = 0.6, **extra
) -> str:
    record = {
        "detection_id": detection_id,
        "camera_id": camera_id,
        "ts": ts.astimezone(UTC).isoformat().replace("+00:00", "Z"),
        "label": label,
        "confidence": confidence,
    }
    record.update(extra)
    return json.dumps(record)


def closed_windows(camera_ids: list[str], per_camera: int, *, start: datetime, gap_s: float = 40.0) -> list[str]:
    """`per_camera` batches per camera, each of two detections 5 s apart, windows further apart than the idle
    timeout."""
    lines = []
    for camera in camera_ids:
        for n in range(per_camera):
            t0 = start + timedelta(seconds=n * (5 + gap_s))
            lines.append(
                detection(
                    f"{camera}-{n}-a",
                    camera,
                    t0,
                    "car",
                    0.7,
                    enrichment={"florence": {"caption": f"a car on the {camera} driveway"}},
                )
            )
            lines.append(detection(f"{camera}-{n}-b", camera, t0 + timedelta(seconds=5), "car", 0.8))
    return lines


def resources(
    db_path: str,
    llm_url: str = "http://127.0.0.1:9",
    *,
    alert_webhook_url: str | None = None,
    **settings_overrides: str,
) -> dict:
    """Resources configured as `definitions.build_resources` does, from test settings (no settings file). The inbox
    defaults to a folder beside the database that does not exist (the relative default depends on the cwd)."""
    settings_overrides.setdefault("HSI_INBOX_DIR", os.path.join(os.path.dirname(db_path), "inbox"))
    settings_overrides.setdefault("SENSOR_HOLD_SECONDS", "0")  # a tick returns at once unless a test asks to hold
    settings = load_settings(
        os.devnull,
        **{"NEMOTRON_MAX_OUTPUT_TOKENS": "256", "PROMPT_SAFETY_MARGIN_TOKENS": "256", "CTX_SIZE": "8192"},
        **settings_overrides,
    )
    return {
        "duckdb": HsiDuckDBResource(database=db_path),
        "alert_webhook": AlertWebhookResource(url=alert_webhook_url),
        "llm": LlamaServerResource(
            urls=[llm_url],
            read_timeout_seconds=120,
            startup_timeout_seconds=5,
            max_output_tokens=256,
            fallback_total_slots=settings.PARALLEL,
            fallback_slot_context=configured_slot_context(settings),
        ),
        "enrichment": InlineEnrichmentResource(),
        "pipeline_settings": PipelineSettingsResource.from_settings(settings),
    }


def hours_ago(hours: float) -> datetime:
    return datetime.now(UTC) - timedelta(hours=hours)


def test_definitions(res: dict) -> dg.Definitions:
    """The project's assets, jobs and sensors bound to test resources (temp DuckDB file, test server)."""
    from hsi_dagster import definitions

    return dg.Definitions(
        assets=definitions.defs.assets,
        jobs=definitions.defs.jobs,
        sensors=definitions.defs.sensors,
        schedules=definitions.defs.schedules,
        resources=res,
    )


def sensor_tick(sensor: dg.SensorDefinition, instance: dg.DagsterInstance, res: dict, cursor: str | None):
    """Evaluate one tick and apply its partition requests to the instance, as the daemon would."""
    with dg.build_sensor_context(
        instance_ref=instance.get_ref(), cursor=cursor, resources=res, definitions=test_definitions(res)
    ) as context:
        result = sensor.evaluate_tick(context)
    for request in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    return result


def materialize_request(
    assets: list, request: dg.RunRequest, instance: dg.DagsterInstance, res: dict, *, raise_on_error: bool = True
) -> dg.ExecuteInProcessResult:
    """Run what a sensor requested, as the daemon would: the request's partition and tags, in process."""
    return dg.materialize(
        assets,
        partition_key=request.partition_key,
        instance=instance,
        resources=res,
        tags=request.tags,
        raise_on_error=raise_on_error,
    )


def run_failure_context(
    failed: dg.ExecuteInProcessResult, instance: dg.DagsterInstance, res: dict
) -> dg.RunFailureSensorContext:
    """What a run-failure sensor (unassessed_fast_path_sensor) receives for the failed run."""
    return dg.build_run_status_sensor_context(
        sensor_name="unassessed_fast_path_sensor",
        dagster_event=failed.get_run_failure_event(),
        dagster_instance=instance,
        dagster_run=failed.dagster_run,
        resources={"duckdb": res["duckdb"], "alert_webhook": res["alert_webhook"]},
    ).for_run_failure()


def step_failure_message(result: dg.ExecuteInProcessResult) -> str:
    """The first step failure's message with its causes (the retry wrapper's, then the Failure that caused it)."""
    failure = next(e for e in result.all_events if e.is_step_failure).event_specific_data.error
    message = ""
    while failure is not None:
        message += failure.message
        failure = failure.cause
    return message
