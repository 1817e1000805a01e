"""Consistency on the REAL embedded llama.cpp server (issue 24 item 5): the demo's garage pair (a person in a dark
hoodie with the hood up and a face covering lingering at the garage door at night; the issue measured 93 critical
and 9 low for the same sentence) gets the same level, and a batch judged twice gets the same score. Both go through
the production pipeline (sensor tick, the four batch assets) with the example camera profiles, so the stored verdict
is the model's answer (temperature 0, fixed seed: llm/protocol.py) raised to the evidence floor."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import dagster as dg
import duckdb
import pytest

from hsi_dagster.assets.assessments import risk_assessments
from hsi_dagster.assets.batches import detection_batches
from hsi_dagster.assets.contexts import enriched_contexts
from hsi_dagster.assets.prompts import budgeted_prompts
from hsi_dagster.sensors import batch_window_sensor
from hsi_dagster.settings import EXAMPLE_CAMERAS_PATH
from hsi_dagster.storage.ingest import ingest_lines
from tests.support.pipeline_helpers import detection, resources, sensor_tick

pytestmark = [pytest.mark.llm, pytest.mark.slow]
PIPELINE = [detection_batches, enriched_contexts, budgeted_prompts, risk_assessments]
CAPTION = "A person in a dark hoodie with the hood up and a face covering lingers at the garage_door at night"
ACTIONS = ("loitering near the door", "trying the door handle", "crouching by the door")


def lingering_at_the_garage_door(start: datetime, track: str, frames: int, jitter: float) -> list[str]:
    """One demo-like loitering batch: frames 8 s apart (over a minute at the door), all below the fast path."""
    return [
        detection(
            f"{track}-{n}",
            "garage",
            start + timedelta(seconds=8 * n),
            "person",
            round(0.80 + jitter + 0.01 * (n % 3), 3),
            track_id=track,
            zone="garage_door",
            enrichment={
                "florence": {"caption": CAPTION},
                "clothing": {"description": "a dark hoodie with the hood up and a face covering", "suspicious": True},
                "action": {"label": ACTIONS[n % len(ACTIONS)], "score": round(0.7 + jitter, 3)},
                "reid": {"identity": None, "known": False, "score": 0.2},
                "violence": {"score": 0.03},
                "scene": {"description": "the inside of a garage", "lighting": "night", "indoor": True},
            },
        )
        for n in range(frames)
    ]


def verdicts(db: str) -> dict[str, tuple]:
    with duckdb.connect(db, read_only=True) as conn:
        rows = conn.execute(
            "SELECT batch_id, status, risk_score, risk_level, model_score, floor_score, decided_by"
            " FROM risk_assessments"
        ).fetchall()
    return {row[0]: row[1:] for row in rows}


def test_the_demos_garage_pair_gets_one_level_and_a_batch_judged_twice_one_score(llama_server, tmp_path):
    db = str(tmp_path / "hsi.duckdb")
    night = datetime.now(UTC).replace(hour=2, minute=10, second=0, microsecond=0) - timedelta(days=1)  # 02:10 London
    lines = lingering_at_the_garage_door(night, "trk-a", 10, 0.0)
    lines += lingering_at_the_garage_door(night + timedelta(minutes=35), "trk-b", 9, 0.03)
    ingest_lines(db, lines)
    # MODEL_TRUST=0: SmolLM2's score is noise (93 or 9 for the same sentence), so the floor's level decides: the trust
    # a measurement gives it (core/verdict/trust.py); unmeasured, the default would let that noise through.
    res = resources(db, llama_server.url, CAMERA_CONTEXT_PATH=str(EXAMPLE_CAMERAS_PATH), MODEL_TRUST="0")
    with dg.instance_for_test() as instance:
        tick = sensor_tick(batch_window_sensor, instance, res, None)
        keys = sorted(r.partition_key for r in tick.run_requests)
        assert len(keys) == 2
        for key in keys:
            assert dg.materialize(PIPELINE, partition_key=key, instance=instance, resources=res).success
        first = verdicts(db)
        assert dg.materialize(PIPELINE, partition_key=keys[0], instance=instance, resources=res).success
        again = verdicts(db)
    a, b = (first[key] for key in keys)
    # Either the model's answer raised to the floor, or the floor's own verdict when the model's reply was unusable
    # (the two slots of the shared server do not give bit-identical replies): the level must agree either way.
    assert {a[0], b[0]} <= {"ok", "floor_only"}, (a, b)
    assert a[2] == b[2], f"the garage pair got {a} and {b} (status, score, level, model, floor, decided by)"
    assert again[keys[0]] == a, "the same batch judged twice"
    assert a[2] in ("high", "critical") and a[4] >= 60  # masked stranger at an entry zone at night: the floor
