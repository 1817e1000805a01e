"""Model trust through the production asset (core/verdict/trust.py, assets/assessments.py).

- On the REAL embedded llama.cpp server: the trust follows the server that answered (its /v1/models name and size
  make the fingerprint); unmeasured, the stated default applies and says why; a measured record for that fingerprint
  is read and applied; a record for the same model name but another size is refused, naming both fingerprints.
- FAULT INJECTION with the fake llama-server (tests/support/fake_llama.py, it runs no model and has no /v1/models):
  a server that does not report its model, scripted to answer the issue's crowbar reply (92, "prying the front door
  with a crowbar", no rule firing). Stored per MODEL_TRUST, shown in the metadata, flagged by the text check when
  stored low, and carried to Home Assistant's state attributes and the phone's event payload.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest

from hsi_dagster.assets.assessments import answering_trust, risk_assessments
from hsi_dagster.assets.batches import detection_batches
from hsi_dagster.assets.contexts import enriched_contexts
from hsi_dagster.assets.prompts import budgeted_prompts
from hsi_dagster.core.evaluation.trust_sweep import TrustSample, trust_sweep
from hsi_dagster.core.outbound.mqtt_messages import state_payload, verdict_event_payload
from hsi_dagster.core.verdict.trust import DEFAULT_TRUST, ModelFingerprint
from hsi_dagster.llm.options import short_model_name
from hsi_dagster.sensors import batch_window_sensor
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.ingest import ingest_lines
from hsi_dagster.storage.mqtt_outbox import unpublished_verdicts
from hsi_dagster.storage.pipeline_tables import load_assessment
from hsi_dagster.storage.trust import save_trust
from tests.support.fake_llama import Reply
from tests.support.pipeline_helpers import closed_windows, hours_ago, resources, sensor_tick

PIPELINE = [detection_batches, enriched_contexts, budgeted_prompts, risk_assessments]
CROWBAR = {
    "risk_score": 92,
    "risk_level": "critical",
    "summary": "Masked man prying the front door open with a crowbar in daylight.",
    "reasoning": "A person forces the front door with a crowbar.",
}


def one_batch(db: str, res: dict, instance: dg.DagsterInstance) -> str:
    """One closed batch of two car detections (no evidence rule fires), its partition added as the sensor does."""
    ingest_lines(db, closed_windows(["front_door"], 1, start=hours_ago(1)))
    (request,) = sensor_tick(batch_window_sensor, instance, res, None).run_requests
    return request.partition_key


def materialization(result: dg.ExecuteInProcessResult) -> dict:
    (event,) = [e for e in result.get_asset_materialization_events() if e.asset_key == risk_assessments.key]
    return {key: value.value for key, value in event.materialization.metadata.items()}


def row(db: str, batch_id: str) -> dict:
    with connect(db, read_only=True) as conn:
        stored = load_assessment(conn, batch_id)
    assert stored is not None
    return stored


def measure(db: str, fingerprint: ModelFingerprint, trust: int) -> None:
    with connect(db) as conn:
        points = trust_sweep([TrustSample("s1", "low", 5, 0)])
        save_trust(conn, fingerprint, trust, points, goal=0.03, split="holdout", configuration="test")


@pytest.mark.llm
def test_trust_follows_the_real_servers_model_unmeasured_measured_and_refused(llama_server, tmp_path):
    """Production's lookup (`answering_trust`: the answering server's /v1/models, then the DuckDB record; no
    completion) on the real server: its model name and size make the fingerprint; unmeasured, the stated default;
    a record for that fingerprint is applied; a record for another size of the model is refused, by name. The full
    asset path with a real completion stores these columns too (tests/dagster/test_pipeline_e2e.py)."""
    db = str(tmp_path / "hsi.duckdb")
    res = resources(db, llama_server.url)
    llm, duckdb = res["llm"], res["duckdb"]
    identity = llm.model_identity(llama_server.url)
    # The bundled model at full quality carries the project's shipped measurement (storage/shipped_trust.py); at
    # standard quality nothing was measured, so the stated default applies and says why.
    shipped = answering_trust(llm, duckdb, llama_server.url, "plain", "full", "auto")
    assert shipped.source == "measured" and "shipped with hsi" in shipped.reason
    unmeasured = answering_trust(llm, duckdb, llama_server.url, "plain", "standard", "auto")
    model, size, schema, quality = (unmeasured.fingerprint or "").split("|")
    assert model.lower().startswith("smollm2") and "/" not in model  # the short name, as rows carry it
    assert int(size) > 50_000_000 and (schema, quality) == ("plain", "standard")  # llama.cpp's meta.size, bytes
    assert identity is not None and (short_model_name(identity.name), identity.size) == (model, int(size))
    assert shipped.fingerprint == f"{model}|{size}|plain|full"  # the shipped record is for this very file
    assert (unmeasured.value, unmeasured.source) == (DEFAULT_TRUST, "default")
    assert unmeasured.reason == f"no measured trust for {unmeasured.fingerprint}: stated default trust {DEFAULT_TRUST}"

    fingerprint = ModelFingerprint(model, int(size), schema, quality)
    measure(db, fingerprint, 0)
    trust = answering_trust(llm, duckdb, llama_server.url, schema, quality, "auto")
    assert (trust.value, trust.source, trust.reason, trust.fingerprint) == (
        0,
        "measured",
        "measured trust 0",
        fingerprint.key,
    )
    assert answering_trust(llm, duckdb, llama_server.url, "rubric", quality, "auto").unmeasured  # another schema

    with connect(db) as conn:  # only another size of the same model was measured: refused, by name
        conn.execute("DELETE FROM model_trust")
    other = ModelFingerprint(model, int(size) + 1, schema, quality)
    measure(db, other, 3)
    refused = answering_trust(llm, duckdb, llama_server.url, schema, quality, "auto")
    assert (refused.value, refused.source) == (DEFAULT_TRUST, "default")
    assert "measured trust record refused" in refused.reason
    assert other.key in refused.reason and fingerprint.key in refused.reason
    configured = answering_trust(llm, duckdb, llama_server.url, schema, quality, 1)
    assert (configured.value, configured.reason) == (1, "MODEL_TRUST=1")  # a number is not looked up


def crowbar_completion() -> Reply:
    return Reply(
        body={
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": json.dumps(CROWBAR)}}
            ],
            "model": "fake.gguf",
            "usage": {"prompt_tokens": 900, "completion_tokens": 60, "prompt_tokens_details": {"cached_tokens": 0}},
        }
    )


@pytest.mark.fault
@pytest.mark.parametrize(
    "setting, score, level, source",
    [("0", 29, "low", "setting"), ("auto", 84, "high", "default"), ("3", 92, "critical", "setting")],
)
def test_the_crowbar_reply_from_a_server_that_does_not_report_its_model(
    fake_llama, tmp_path, setting, score, level, source
):
    db = str(tmp_path / "hsi.duckdb")
    res = resources(db, fake_llama.url, MODEL_TRUST=setting)
    with dg.instance_for_test() as instance:
        key = one_batch(db, res, instance)
        res["llm"].ensure_ready()  # the schema probe first: the scripted reply is the assessment's
        fake_llama.script("/v1/chat/completions", crowbar_completion())
        result = dg.materialize(PIPELINE, partition_key=key, instance=instance, resources=res)
    stored = row(db, key)
    assert (stored["risk_score"], stored["risk_level"], stored["floor_score"]) == (score, level, 0)
    assert (stored["model_score"], stored["model_level"], stored["trust_source"]) == (92, "critical", source)
    assert stored["model_fingerprint"] is None  # nothing reported: no fingerprint to measure or trust
    metadata = materialization(result)
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert checks["stored_assessment_valid"].passed
    text_check = checks["stored_level_matches_its_text"]
    if setting == "auto":
        reason = f"the server that answered ({fake_llama.url}) did not report its model: stated default trust 2"
        assert stored["trust_reason"] == reason and metadata["trust_warning"] == f"unmeasured trust: {reason}"
        assert metadata["model_note"] == f"model said critical; not trusted for this model: {reason}"
    if setting == "0":
        assert metadata["model_note"] == "model said critical; not trusted for this model: MODEL_TRUST=0"
        assert not text_check.passed and text_check.severity == dg.AssetCheckSeverity.WARN
        assert text_check.metadata["described"].value == "forced entry"
    else:
        assert text_check.passed
    if setting == "3":
        assert metadata["model_note"] == "none"

    # Home Assistant's state attributes and the phone's event payload carry what the model said.
    with connect(db, read_only=True) as conn:
        (verdict,) = unpublished_verdicts(conn, datetime.now(UTC) - timedelta(hours=1), 10)
    state, event = state_payload(verdict), verdict_event_payload(verdict)
    assert state["level"] == level and state["model_level"] == "critical"
    assert state["model_trust"] == stored["model_trust"] and event["model_note"] == state["model_note"]
    assert (state["model_note"] is None) == (setting == "3")
