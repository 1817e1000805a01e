"""The Frigate-shaped set through the real Frigate mapping (storage.frigate.load_frigate_messages, the path of `hsi
frigate import`) and the pipeline's batching into scenarios; a scene judged by its highest batch; a batch no scene
covers reported; the floor-only pass on the whole set against a real DuckDB file, its figures consistent with the
labels."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from hsi_dagster.core.evaluation.metrics import ScenarioResult
from hsi_dagster.evaluation.configurations import floor_configurations, for_set
from hsi_dagster.evaluation.engine import evaluate_and_store
from hsi_dagster.evaluation.frigate_set import UNMATCHED, FrigateScenarios, frigate_scenarios
from hsi_dagster.resources import HsiDuckDBResource
from hsi_dagster.settings import HsiSettings
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.evaluation import load_results
from hsi_dagster.synthetic.frigate_eval import FRIGATE_EVAL_DIR, PAYLOADS_FILE, FrigateSetError, load_labels
from hsi_dagster.synthetic.scenarios import load_scenarios


@pytest.fixture(scope="module")
def settings() -> HsiSettings:
    return HsiSettings(_env_file=None)  # type: ignore[call-arg]


@pytest.fixture(scope="module")
def frigate(settings: HsiSettings, tmp_path_factory: pytest.TempPathFactory) -> FrigateScenarios:
    return frigate_scenarios(settings, workdir=tmp_path_factory.mktemp("scratch"))


def test_every_scene_maps_into_batches_of_its_camera(frigate: FrigateScenarios) -> None:
    labels = load_labels()
    assert frigate.imported.quarantined == 0 and frigate.imported.detections > len(labels)
    assert frigate.unmatched == []
    assert set(frigate.batches_by_scene) == {label.scene_id for label in labels}
    cameras = {label.scene_id: label.camera_id for label in labels}
    for scenario in frigate.scenarios:
        scene_id = scenario.scenario_id.split(".b")[0]
        assert scenario.camera_id == scenario.batch["camera_id"] == cameras[scene_id]
        assert {d["camera_id"] for d in scenario.detections} == {cameras[scene_id]}
        assert all(d["detection_id"].startswith("frigate:") for d in scenario.detections)  # the real mapping's ids
    # every scene's review reaches at least one of its batches (the Frigate evidence the context reads)
    reviewed = {s.scenario_id.split(".b")[0] for s in frigate.scenarios if s.reviews}
    assert reviewed == set(cameras)
    # overlapping zones stay a list through the mapping
    zones = [d["enrichment"]["frigate"].get("current_zones") for s in frigate.scenarios for d in s.detections]
    assert ["walkway", "porch"] in zones and ["driveway", "parking_spot"] in zones


def test_a_late_description_joins_its_tracks_batch(frigate: FrigateScenarios) -> None:
    """back_door_stranger_night: Frigate's GenAI answers 45-70 s after the object ended; the scene stays one batch."""
    late = [s for s in frigate.scenarios if s.category == "back_door_stranger_night"]
    assert len(late) == 2 and all(len(frigate.batches_by_scene[s.scenario_id.split(".b")[0]]) == 1 for s in late)
    for scenario in late:
        (description,) = [d for d in scenario.detections if ":description:" in d["detection_id"]]
        assert description["enrichment"]["florence"]["caption"].startswith("A person in dark clothes")
        assert description["enrichment"]["frigate"]["current_zones"] == ["back_step"]


def test_split_and_scene_selection(settings: HsiSettings, tmp_path: Path) -> None:
    holdout = frigate_scenarios(settings, split="holdout", workdir=tmp_path)
    assert holdout.scenes and {s.split for s in holdout.scenes} == {"holdout"}
    assert {s.split for s in holdout.scenarios} == {"holdout"}
    one = frigate_scenarios(settings, scene_ids=["f038"], workdir=tmp_path)
    assert [s.scene_id for s in one.scenes] == ["f038"] and {s.category for s in one.scenarios} == {"knife_night"}
    with pytest.raises(ValueError, match="unknown scene id"):
        frigate_scenarios(settings, scene_ids=["f999"], workdir=tmp_path)


def test_a_batch_no_scene_covers_is_reported(settings: HsiSettings, tmp_path: Path) -> None:
    folder = tmp_path / "set"
    shutil.copytree(FRIGATE_EVAL_DIR, folder)
    first = json.loads((folder / PAYLOADS_FILE).read_text(encoding="utf-8").split("\n", 1)[0].split(" ", 1)[1])
    stray = {**first["after"], "id": "stray-1", "frame_time": first["after"]["frame_time"] - 7200.0}
    late = {**stray, "id": "stray-2", "frame_time": 4102444800.0}  # 2100: after every scene, still closed and kept
    stray["start_time"] = stray["frame_time"]
    with (folder / PAYLOADS_FILE).open("a", encoding="utf-8") as file:
        for payload in (stray, late):
            file.write("frigate/events " + json.dumps({"type": "new", "before": None, "after": payload}) + "\n")
    found = frigate_scenarios(settings, folder, workdir=tmp_path)
    assert [s.category for s in found.unmatched] == [UNMATCHED, UNMATCHED]
    assert {s.batch["camera_id"] for s in found.unmatched} == {first["after"]["camera"]}
    assert len(found.all()) == len(found.scenarios) + 2
    (folder / "labels.jsonl").write_text("", encoding="utf-8")
    with pytest.raises(FrigateSetError, match="no labeled scenes"):
        frigate_scenarios(settings, folder, workdir=tmp_path)


def _result(scenario_id: str, score: int | None, level: str | None, status: str = "ok") -> ScenarioResult:
    return ScenarioResult(
        "frigate.floor.full",
        scenario_id,
        "loiter_door_night",
        "high",
        60,
        84,
        False,
        status,
        risk_score=score,
        risk_level=level,
        summary=f"s{score}",
        split="holdout",
    )


def test_a_scene_is_judged_by_its_highest_batch(frigate: FrigateScenarios) -> None:
    scenes = [s for s in frigate.scenes if s.scene_id in ("f028", "f029")]
    only = replace(frigate, scenes=scenes, batches_by_scene={"f028": ["b1", "b2", "b3"]})
    combined = only.combine_by_scene(
        "frigate.floor.full",
        [_result("f028.b1", 0, "low"), _result("f028.b2", 70, "high"), _result("f028.b3", None, None, "invalid")],
    )
    assert [(r.scenario_id, r.risk_level, r.risk_score) for r in combined] == [
        ("f028", "high", 70),
        ("f029", None, None),
    ]
    assert combined[0].summary == "3 batches, highest shown: s70"
    assert (
        combined[1].status == "no_batch"
        and combined[1].predicted is None
        and combined[1].configuration == "frigate.floor.full"
    )  # no batch: a miss, never dropped
    with_batches = replace(only, batches_by_scene={"f028": ["b1"], "f029": ["b1"]})
    (_, not_run) = with_batches.combine_by_scene("frigate.floor.full", [_result("f028.b1", 0, "low")])
    assert not_run.status == "not_run" and not_run.error == "none of the scene's batches was run"


def test_floor_only_pass_on_a_real_duckdb(frigate: FrigateScenarios, settings: HsiSettings, tmp_path: Path) -> None:
    duckdb = HsiDuckDBResource(database=str(tmp_path / "eval.duckdb"))
    [project] = floor_configurations(["full"])
    evaluate_and_store(project, load_scenarios()[:3], None, settings, duckdb)  # the project's set, same database
    [configuration] = for_set(floor_configurations(["full"]), "frigate")
    assert configuration.floor_name == "frigate.floor.full"
    stored = evaluate_and_store(
        configuration, frigate.all(), None, settings, duckdb, profiles={}, combine=frigate.combine_by_scene
    )
    assert stored.compared == ["frigate.floor.full"]  # the two sets are never compared with each other
    labels = load_labels()
    levels = Counter(label.expected_level for label in labels)
    figures = stored.figures["frigate.floor.full"]
    assert figures.scenarios == len(labels)
    assert figures.alert_scenarios == levels["high"] + levels["critical"] and figures.low_scenarios == levels["low"]
    assert figures.adversarial_scenarios == sum(label.adversarial for label in labels)
    assert sum(sum(row.values()) for row in figures.confusion.values()) == len(labels)
    with connect(str(tmp_path / "eval.duckdb"), read_only=True) as conn:
        rows = load_results(conn, "frigate.floor.full")
    assert sorted(r.scenario_id for r in rows) == sorted(label.scene_id for label in labels)
    by_id = {label.scene_id: label for label in labels}
    right = sum(r.risk_level == by_id[r.scenario_id].expected_level for r in rows)
    assert figures.level_accuracy == pytest.approx(right / len(labels))
    assert all(r.split == by_id[r.scenario_id].split and r.llm_calls == 0 for r in rows)
    knives = [r for r in rows if r.category == "knife_night"]
    assert knives and all(r.risk_level == "critical" for r in knives)  # a knife tracked as its own object
