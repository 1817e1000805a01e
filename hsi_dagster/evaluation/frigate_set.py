"""The Frigate-shaped labeled set (synthetic/frigate_eval.py) as scenarios the evaluation engine runs.

Its MQTT payloads go the way `hsi frigate import` takes them: `storage.frigate.load_frigate_messages` (the real
mapping, state policy, validator, reviews) into a scratch DuckDB file, then the pipeline's batching
(`pending_closed_batches`, `record_batch`), then each recorded batch with its detections and the Frigate reviews
covering it (`load_batch`, `reviews_covering`), exactly what the `enriched_contexts` asset reads. No camera profile:
what a new Frigate user has. Every batch has the `situation` "frigate": the set is one household's cameras over
its days, so a `.visits` pass links its batches into visits across scenes (evaluation/visit_floors.py).

Each produced batch is matched to the labeled scene of its camera whose time span it falls in
(`SceneLabel.covers`) and becomes one `Scenario` (`<scene>.b<n>`) carrying that scene's label. A scene is judged by
its batches' HIGHEST stored level (`combine_by_scene`: a household is told once, by the loudest batch); a scene that
produced no batch (or none of whose batches ran before a deadline) is a result without a verdict (a miss), and a
batch no scene covers is reported as `unmatched`, never dropped silently.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from hsi_dagster.core.evaluation.metrics import ScenarioResult
from hsi_dagster.core.frigate.config import detect_resolutions
from hsi_dagster.core.intake.batching import BatchRules
from hsi_dagster.core.intake.detections import Bounds
from hsi_dagster.settings import HsiSettings
from hsi_dagster.storage.batches import load_batch, pending_closed_batches, record_batch
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.frigate import FrigateReport, load_frigate_messages, read_frigate_file, reviews_covering
from hsi_dagster.storage.frigate_config import load_frigate_config
from hsi_dagster.synthetic.frigate_eval import (
    CONFIG_FILE,
    FRIGATE_EVAL_DIR,
    LABELS_FILE,
    PAYLOADS_FILE,
    FrigateSetError,
    SceneLabel,
    load_labels,
)
from hsi_dagster.synthetic.scenarios import Scenario

SET_NAME = "frigate"  # `hsi eval --set frigate`; its stored configurations are named `frigate.<...>`
UNMATCHED = "unmatched"
BATCH_SEPARATOR = ".b"
END_OF_REPLAY = datetime(3000, 1, 1, tzinfo=UTC)  # the batching clock of the replay: after every payload


@dataclass
class FrigateScenarios:
    scenes: list[SceneLabel]
    scenarios: list[Scenario]  # one per batch a scene covers, in batch order
    unmatched: list[Scenario]  # batches no scene covers (category "unmatched", no label of their own)
    imported: FrigateReport
    batches_by_scene: dict[str, list[str]] = field(default_factory=dict)  # scene -> its batch ids

    def all(self) -> list[Scenario]:
        """What a pass runs: every batch, matched or not (so an unmatched batch's verdict can be reported)."""
        return [*self.scenarios, *self.unmatched]

    def combine_by_scene(self, configuration: str, results: Sequence[ScenarioResult]) -> list[ScenarioResult]:
        """One result per scene, in scene order: its batch with the highest stored score (a batch without a verdict
        counts below any verdict); a scene without a batch: status `no_batch` (no verdict: a miss)."""
        by_scene: dict[str, list[ScenarioResult]] = {}
        for result in results:
            scene_id = result.scenario_id.split(BATCH_SEPARATOR, 1)[0]
            by_scene.setdefault(scene_id, []).append(result)
        combined = []
        for scene in self.scenes:
            members = by_scene.get(scene.scene_id, [])
            if not members:
                combined.append(_no_batch(scene, configuration, bool(self.batches_by_scene.get(scene.scene_id))))
                continue
            best = max(
                members, key=lambda r: (r.predicted is not None, r.risk_score if r.risk_score is not None else -1)
            )
            note = f"{len(members)} batches, highest shown: " if len(members) > 1 else ""
            combined.append(replace(best, scenario_id=scene.scene_id, summary=note + (best.summary or "")))
        return combined


def _no_batch(scene: SceneLabel, configuration: str, had_batches: bool) -> ScenarioResult:
    return ScenarioResult(
        configuration=configuration,
        scenario_id=scene.scene_id,
        category=scene.category,
        expected_level=scene.expected_level,
        band_low=scene.score_band[0],
        band_high=scene.score_band[1],
        adversarial=scene.adversarial,
        status="not_run" if had_batches else "no_batch",
        error="none of the scene's batches was run" if had_batches else "the scene's payloads produced no batch",
        split=scene.split,
    )


def _scenario(scene: SceneLabel | None, scenario_id: str, batch: dict, detections: list, reviews: list) -> Scenario:
    if scene is None:
        return Scenario(
            scenario_id=scenario_id,
            category=UNMATCHED,
            expected_level="low",
            score_band=(0, 100),
            reason="no labeled scene covers this batch",
            adversarial=False,
            camera_id=batch["camera_id"],
            batch=batch,
            detections=detections,
            split="holdout",
            reviews=tuple(reviews),
            situation=SET_NAME,
        )
    return Scenario(
        scenario_id=scenario_id,
        category=scene.category,
        expected_level=scene.expected_level,
        score_band=scene.score_band,
        reason=scene.reason,
        adversarial=scene.adversarial,
        camera_id=batch["camera_id"],
        batch=batch,
        detections=detections,
        split=scene.split,
        reviews=tuple(reviews),
        situation=SET_NAME,
    )


def frigate_scenarios(
    settings: HsiSettings,
    folder: str | Path = FRIGATE_EVAL_DIR,
    *,
    split: str | None = None,
    scene_ids: Sequence[str] = (),
    workdir: str | Path | None = None,
) -> FrigateScenarios:
    """Import the set's payloads into a scratch DuckDB (in `workdir`, else a temporary folder), batch them with the
    settings' BATCH_*/FAST_PATH_* rules and match each batch to its scene. `split` / `scene_ids` keep those scenes
    (unmatched batches are always kept)."""
    folder = Path(folder)
    scenes = load_labels(folder)
    if not scenes:
        raise FrigateSetError(f"{folder / LABELS_FILE}: no labeled scenes")
    unknown = sorted(set(scene_ids) - {s.scene_id for s in scenes})
    if unknown:
        raise ValueError(f"unknown scene id(s): {', '.join(unknown)}")
    resolutions = detect_resolutions(load_frigate_config(folder / CONFIG_FILE), origin=str(folder / CONFIG_FILE))
    messages = read_frigate_file(folder / PAYLOADS_FILE)
    with (
        tempfile.TemporaryDirectory(prefix="hsi-frigate-eval-", dir=workdir) as scratch,
        connect(Path(scratch) / "frigate-eval.duckdb") as conn,
    ):
        imported = load_frigate_messages(
            conn,
            messages,
            source=str(folder / PAYLOADS_FILE),
            resolutions=resolutions.by_camera,
            bounds=Bounds.from_settings(settings),
        )
        rules = BatchRules.from_settings(settings)
        as_of = END_OF_REPLAY  # every batch closed, whenever its payloads are (a stray one is reported, not left open)
        pending = pending_closed_batches(conn, rules, as_of)
        ids = [record_batch(conn, batch.batch_id, rules, as_of).batch_id for batch in pending]
        loaded = []
        for batch_id in ids:
            batch, detections = load_batch(conn, batch_id)
            reviews = reviews_covering(conn, batch["camera_id"], batch["started_at"], batch["last_ts"])
            loaded.append((batch, detections, reviews))
    loaded.sort(key=lambda item: (item[0]["started_at"], item[0]["batch_id"]))
    wanted = {
        s.scene_id for s in scenes if (split is None or s.split == split) and (not scene_ids or s.scene_id in scene_ids)
    }
    result = FrigateScenarios([s for s in scenes if s.scene_id in wanted], [], [], imported)
    for batch, detections, reviews in loaded:
        first, last = batch["started_at"].timestamp(), batch["last_ts"].timestamp()
        scene = next((s for s in scenes if s.covers(batch["camera_id"], first, last)), None)
        if scene is None:
            result.unmatched.append(
                _scenario(None, f"{UNMATCHED}.{len(result.unmatched) + 1}", batch, detections, reviews)
            )
            continue
        if scene.scene_id not in wanted:
            continue
        members = result.batches_by_scene.setdefault(scene.scene_id, [])
        members.append(batch["batch_id"])
        scenario_id = f"{scene.scene_id}{BATCH_SEPARATOR}{len(members)}"
        result.scenarios.append(_scenario(scene, scenario_id, batch, detections, reviews))
    return result
