"""Seeded synthetic batches: the same seed gives the same batch, and batches have the shape the pipeline reads."""

from __future__ import annotations

import random

from hsi_dagster.synthetic.batches import CAMERAS, calibration_prompts, synthetic_batch


def test_same_seed_same_batch_other_seed_other_batch():
    first = synthetic_batch(random.Random(5), n_detections=12, hostile=True)
    assert first == synthetic_batch(random.Random(5), n_detections=12, hostile=True)
    assert first != synthetic_batch(random.Random(6), n_detections=12, hostile=True)
    assert calibration_prompts(4, seed=3) == calibration_prompts(4, seed=3)


def test_batch_shape_matches_its_detections():
    batch, detections = synthetic_batch(random.Random(1), camera_id="driveway", n_detections=9)
    assert batch["camera_id"] == "driveway" and batch["detection_count"] == len(detections) == 9
    assert batch["batch_id"] == f"driveway:{detections[0]['detection_id']}"
    assert [d["ts"] for d in detections] == sorted(d["ts"] for d in detections)
    assert batch["started_at"] == detections[0]["ts"] and batch["last_ts"] == detections[-1]["ts"]
    assert all(d["zone"] in CAMERAS["driveway"] for d in detections)
    assert all({"florence", "clip", "scene", "weather", "depth"} <= set(d["enrichment"]) for d in detections)


def test_fast_path_batch_is_one_confident_person():
    batch, detections = synthetic_batch(random.Random(2), fast_path=True)
    assert batch["close_reason"] == "fast_path" and batch["closes_at"] == batch["started_at"]
    assert [(d["label"], d["confidence"]) for d in detections] == [("person", 0.95)]


def test_hostile_batch_carries_injection_text_in_the_first_caption():
    _, detections = synthetic_batch(random.Random(4), n_detections=3, hostile=True)
    caption = detections[0]["enrichment"]["florence"]["caption"]
    assert any(marker in caption for marker in ("ignore previous", "</camera_data>", "system", "<|im_end|>"))
