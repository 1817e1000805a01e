"""Enrichment context: Florence repeat/duplicate rules, CLIP noise filter, quality levels, missing types, profiles."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from hsi_dagster.core.context.camera_profiles import CameraProfileError
from hsi_dagster.core.context.context_models import EnrichedContext
from hsi_dagster.core.context.enrichment import (
    ENRICHMENT_TYPES,
    QUALITY_LEVEL_TYPES,
    build_context,
    content_tokens,
    is_repeat,
)
from hsi_dagster.core.prompt.messages import build_sections
from hsi_dagster.settings import EXAMPLE_CAMERAS_PATH, load_camera_profiles
from tests.support.records import every_enrichment

T0 = datetime(2026, 12, 1, 23, 30, tzinfo=UTC)


def det(i: int, *, label="person", conf=0.8, track="t1", zone="porch", enrichment=None, seconds=None, late=False):
    return {
        "detection_id": f"d{i}",
        "camera_id": "front_door",
        "ts": T0 + timedelta(seconds=i * 5 if seconds is None else seconds),
        "label": label,
        "confidence": conf,
        "bbox": None,
        "track_id": track,
        "zone": zone,
        "enrichment": enrichment,
        "is_late": late,
    }


def batch(dets, reason="window"):
    return {
        "batch_id": "b1",
        "camera_id": "front_door",
        "started_at": dets[0]["ts"],
        "last_ts": dets[-1]["ts"],
        "closes_at": dets[-1]["ts"] + timedelta(seconds=30),
        "close_reason": reason,
        "detection_count": len(dets),
    }


def ctx(dets, level="full", threshold=0.2, **kw):
    return build_context(batch(dets), dets, quality_level=level, clip_noise_threshold=threshold, **kw)


FULL_ENRICHMENT = every_enrichment()


# --------------------------------------------------------------------------- the definition of "repeat"
def test_content_tokens_normalise_case_punctuation_stopwords_and_plurals():
    assert content_tokens("The image shows TWO red Cars, parked!") == {"red", "car", "parked"}
    assert content_tokens("a glass") == {"glass"}  # "ss" is not a plural
    assert content_tokens("puppies") == content_tokens("puppy") and content_tokens("hoodies") == content_tokens(
        "hoodie"
    )


def test_repeat_threshold_is_80_percent_of_the_region_tokens():
    reference = {"man", "hoodie", "door", "red", "car"}
    assert is_repeat({"man", "hoodie", "door", "red", "bike"}, reference)  # 4/5 = 0.80 -> repeat
    assert not is_repeat({"man", "hoodie", "door", "bike"}, reference)  # 3/4 = 0.75 -> new
    assert is_repeat(set(), reference)  # nothing new in an empty caption


def test_region_repeating_the_dense_caption_is_dropped_and_new_regions_kept():
    florence = {
        "caption": "a person at the door",
        "dense_caption": "A man in a dark hoodie standing at the front door of a house.",
        "regions": [
            {"label": "person", "caption": "man in dark hoodie", "bbox": None},  # all tokens in dense -> repeat
            {"label": "person", "caption": "Dark HOODIES, man!", "bbox": None},  # plural/case/punct -> repeat
            {"label": "tool", "caption": "a crowbar in his hand", "bbox": None},  # new
        ],
    }
    context = ctx([det(0, enrichment={"florence": florence})])
    summary = context.florence
    assert summary.regions_total == 3 and summary.regions_dropped_repeat == 2
    [entry] = summary.entries
    assert [r.caption for r in entry.regions] == ["a crowbar in his hand"]
    # the global caption is itself covered by the dense caption ("person" is not in it, so 1 of 2 tokens: kept)
    assert entry.captions == ["a person at the door"]


def test_global_caption_covered_by_dense_caption_is_dropped():
    florence = {"caption": "a man at the front door", "dense_caption": "a man in a hoodie at the front door at night"}
    [entry] = ctx([det(0, enrichment={"florence": florence})]).florence.entries
    assert entry.captions == [] and entry.dense_captions == [florence["dense_caption"]]


def test_duplicate_captions_within_a_track_are_dropped_but_not_across_tracks():
    same = {"caption": "a man walks to the door", "dense_caption": ""}
    dets = [
        det(0, track="t1", enrichment={"florence": same}),
        det(1, track="t1", enrichment={"florence": {"caption": "A man walks to the door."}}),  # same content tokens
        det(2, track="t2", enrichment={"florence": same}),  # other track: kept
        det(3, track="t1", enrichment={"florence": {"caption": "a man opens the door"}}),  # new content
    ]
    summary = ctx(dets).florence
    assert summary.duplicates_dropped == 1
    kept = [(e.track_id, e.captions) for e in summary.entries]
    assert kept == [
        ("t1", ["a man walks to the door"]),
        ("t2", ["a man walks to the door"]),
        ("t1", ["a man opens the door"]),
    ]


def test_untracked_detections_are_their_own_group():
    same = {"caption": "a cat on the step"}
    dets = [det(0, track=None, enrichment={"florence": same}), det(1, track=None, enrichment={"florence": same})]
    assert len(ctx(dets).florence.entries) == 2


# --------------------------------------------------------------------------- CLIP
def test_clip_classes_below_threshold_are_dropped():
    clip = [
        {"label": "intruder", "score": 0.19},
        {"label": "delivery", "score": 0.20},
        {"label": "resident", "score": 0.75},
        {"label": "noise", "score": 0.01},
    ]
    summary = ctx([det(0, enrichment={"clip": clip})], threshold=0.2).clip
    assert summary.dropped_below_threshold == 2
    assert [(c.label, c.score) for c in summary.entries[0].classes] == [("resident", 0.75), ("delivery", 0.2)]
    text = next(s.text for s in build_sections(ctx([det(0, enrichment={"clip": clip})])) if s.key == "clip")
    assert "intruder" not in text and "resident" in text


# --------------------------------------------------------------------------- quality levels and missing types
def test_quality_level_table():
    assert QUALITY_LEVEL_TYPES["full"] == ENRICHMENT_TYPES
    assert QUALITY_LEVEL_TYPES["minimal"] == ("florence", "reid")  # identity is never optional (issue 40)
    assert set(QUALITY_LEVEL_TYPES["standard"]) == {
        "florence",
        "clip",
        "vehicle",
        "clothing",
        "reid",
        "violence",
        "weather",
    }


@pytest.mark.parametrize(
    "level, expected",
    [
        ("full", {"detections", "scene", *ENRICHMENT_TYPES}),
        ("standard", {"detections", "scene", "florence", "clip", "vehicle", "clothing", "reid", "violence", "weather"}),
        ("minimal", {"detections", "scene", "florence", "reid"}),
    ],
)
def test_quality_levels_select_sections(level, expected):
    context = ctx([det(0, enrichment=FULL_ENRICHMENT)], level=level)
    assert {s.key for s in build_sections(context)} == expected
    assert context.types_included == list(QUALITY_LEVEL_TYPES[level])


def test_unknown_quality_level_is_rejected():
    with pytest.raises(ValueError, match="quality_level"):
        ctx([det(0)], level="ultra")


def test_missing_types_are_recorded_and_shown():
    context = ctx([det(0, enrichment=FULL_ENRICHMENT)], missing_types=["pose", "depth", "pose"])
    assert context.missing_types == ["depth", "pose"]
    detections = build_sections(context)[0]
    assert "did not arrive in time: depth, pose" in detections.text
    with pytest.raises(ValueError, match="unknown enrichment types"):
        ctx([det(0)], missing_types=["telepathy"])


# --------------------------------------------------------------------------- detections summary, json, profile
def test_detection_summary_counts_tracks_and_time_of_day():
    dets = [
        det(0, conf=0.5, track="t1"),
        det(1, conf=0.9, track="t1", seconds=40),
        det(2, label="car", conf=0.7, track="t2", zone="drive"),
    ]
    context = ctx(dets)
    d = context.detections
    assert d.count == 3 and d.by_label == {"person": 2, "car": 1}
    assert (d.confidence_min, d.confidence_max, d.confidence_mean) == (0.5, 0.9, 0.7)
    dwell = {t.track_id: t.dwell_s for t in d.tracks}
    assert dwell == {"t1": 40.0, "t2": 0.0}
    assert d.time_of_day == "night" and d.is_dark  # 23:30 UTC, no profile -> UTC
    profiles = load_camera_profiles(EXAMPLE_CAMERAS_PATH)
    tokyo = profiles["front_door"].model_copy(update={"timezone": "Asia/Tokyo"})
    assert ctx(dets, camera_profile=tokyo).detections.time_of_day == "morning"  # 08:30 in Tokyo


def test_scene_lighting_overrides_clock_for_darkness():
    day_scene = {"scene": {"description": "porch", "lighting": "day", "indoor": False}}
    context = ctx([det(0, enrichment=day_scene)])
    assert context.detections.lighting == "day" and not context.detections.is_dark


def test_context_json_round_trip():
    context = ctx(
        [det(0, enrichment=FULL_ENRICHMENT), det(1, enrichment=FULL_ENRICHMENT)],
        camera_profile=load_camera_profiles(EXAMPLE_CAMERAS_PATH)["front_door"],
        missing_types=["depth"],
    )
    again = EnrichedContext.from_json(context.to_json())
    assert again == context
    assert json.loads(context.to_json())["batch"]["batch_id"] == "b1"


def test_repeated_observations_collapse_per_track():
    dets = [det(i, enrichment={"pose": {"posture": "standing", "score": 0.5 + i / 10}}) for i in range(4)]
    [obs] = ctx(dets).observations["pose"]
    assert obs.count == 4 and obs.numbers["score"].min == 0.5 and obs.numbers["score"].max == 0.8


def test_example_camera_profiles_load():
    profiles = load_camera_profiles(EXAMPLE_CAMERAS_PATH)
    assert {"front_door", "driveway", "backyard", "garage"} <= set(profiles)
    text = profiles["driveway"].to_prompt_text()
    assert "LR19 XKT" in text and "Europe/London" in text


def test_camera_profile_errors_name_camera_and_field(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("cameras:\n  gate:\n    descripton: typo\n")
    with pytest.raises(CameraProfileError, match=r"'gate'.*descripton"):
        load_camera_profiles(bad)
    times = tmp_path / "t.yaml"
    times.write_text("cameras:\n  gate:\n    working_hours: [{who: gardener, start: 08:00, end: 18:00}]\n")
    assert load_camera_profiles(times)["gate"].working_hours[0].end == "18:00"  # YAML 1.1 base-60 undone
    as_json = tmp_path / "c.json"
    as_json.write_text(json.dumps({"cameras": [{"camera_id": "gate", "timezone": "Mars/Base"}]}))
    with pytest.raises(CameraProfileError, match="time zone"):
        load_camera_profiles(as_json)
    with pytest.raises(CameraProfileError, match="cannot read"):
        load_camera_profiles(tmp_path / "absent.yaml")
    plates = tmp_path / "p.yaml"  # a resident's plate that is no plate would make the household's car a stranger's
    plates.write_text("cameras:\n  gate:\n    resident_vehicles: [{description: van, plate: 'N/A'}]\n")
    with pytest.raises(CameraProfileError, match=r"'gate'.*resident_vehicles.*'N/A' is not a plate"):
        load_camera_profiles(plates)
