"""`risk_timeline`: the PNG and the daily table come from real DuckDB rows, and the picture shows what they say.

The PNG is decoded and read pixel by pixel: its size, the four level bands in their colours at the heights of the
score ranges, each assessed batch's marker in its camera's colour where its time and score put it, and a mark for
each batch without a verdict.
"""

from __future__ import annotations

import base64
import io
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import numpy as np
import pytest
from matplotlib import image as mpimg

from hsi_dagster.assets.timeline import SUMMARY_METADATA_KEY, TIMELINE_METADATA_KEY, risk_timeline
from hsi_dagster.core.outbound.timeline import (
    AXES_RECT,
    BAND_COLOURS,
    NOT_ASSESSED_COLOUR,
    NOT_ASSESSED_Y,
    SIZE_PX,
    Y_RANGE,
    camera_colours,
)
from hsi_dagster.core.prompt.risk_schema import LEVEL_BANDS
from hsi_dagster.jobs import risk_timeline_job, risk_timeline_schedule
from hsi_dagster.resources import HsiDuckDBResource
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.timeline import risk_points_between
from tests.support.observability_data import DAY, ProcessedSet, build_processed_set

DATA_URI = re.compile(r"!\[[^\]]*\]\(data:image/png;base64,(?P<data>[A-Za-z0-9+/=]+)\)")


@pytest.fixture(scope="module")
def processed(tmp_path_factory: pytest.TempPathFactory) -> ProcessedSet:
    return build_processed_set(tmp_path_factory.mktemp("timeline") / "hsi.duckdb")


def materialize_day(db_path: Path, day: datetime) -> dict:
    """Materialize one day on a real (ephemeral) instance; returns the materialization's metadata."""
    result = dg.materialize(
        [risk_timeline],
        partition_key=day.strftime("%Y-%m-%d"),
        resources={"duckdb": HsiDuckDBResource(database=str(db_path))},
        instance=dg.DagsterInstance.ephemeral(),
    )
    assert result.success
    [event] = result.asset_materializations_for_node("risk_timeline")
    return {key: value.value for key, value in event.metadata.items()}


def decode_png(markdown: str) -> np.ndarray:
    match = DATA_URI.fullmatch(markdown.strip())
    assert match, markdown[:200]
    pixels = mpimg.imread(io.BytesIO(base64.b64decode(match["data"])), format="png")
    return np.round(pixels[..., :3] * 255).astype(int)  # RGB 0-255, rows from the top


def rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def to_pixel(day: datetime, at: datetime, score: float) -> tuple[int, int]:
    """(row, column) of a data point, from the axes rectangle and the axis ranges the renderer uses."""
    width, height = SIZE_PX
    left, bottom, axes_w, axes_h = AXES_RECT
    x = (left + axes_w * (at - day) / timedelta(days=1)) * width
    y = (bottom + axes_h * (score - Y_RANGE[0]) / (Y_RANGE[1] - Y_RANGE[0])) * height
    return int(round(height - y)), int(round(x))


def near(pixels: np.ndarray, row: int, column: int, colour: str, radius: int = 2) -> int:
    """How many pixels within `radius` of (row, column) have exactly `colour`."""
    patch = pixels[row - radius : row + radius + 1, column - radius : column + radius + 1]
    return int(np.all(patch == rgb(colour), axis=-1).sum())


def test_timeline_png_shows_bands_and_every_batch_of_the_day(processed: ProcessedSet) -> None:
    metadata = materialize_day(processed.db_path, DAY)
    pixels = decode_png(metadata[TIMELINE_METADATA_KEY])
    assert pixels.shape == (SIZE_PX[1], SIZE_PX[0], 3)  # 1100 x 440

    # The bands: at 23:30 (no batch, no grid line) each score range shows its level's colour, in order.
    column = to_pixel(DAY, DAY + timedelta(hours=23.5), 0)[1]
    for level, low, high in LEVEL_BANDS:
        for score in (low + 2, (low + high) / 2, high - 1):
            row = to_pixel(DAY, DAY, score)[0]
            assert tuple(pixels[row, column]) == rgb(BAND_COLOURS[level]), (level, score)
    for level, colour in BAND_COLOURS.items():
        share = np.all(pixels == rgb(colour), axis=-1).mean()
        assert share > 0.04, (level, share)  # each band is a real area of the picture, not a legend swatch

    # Every assessed batch: a marker in its camera's colour at (start time, score).
    with connect(processed.db_path, read_only=True) as conn:
        points = risk_points_between(conn, DAY, DAY + timedelta(days=1))
    colours = camera_colours(points)
    assessed = [p for p in points if p.risk_score is not None]
    assert len(assessed) == len(processed.score_of) == 15
    for point in assessed:
        assert point.risk_score == processed.score_of[point.batch_id]
        row, column = to_pixel(DAY, point.started_at, point.risk_score)
        assert near(pixels, row, column, colours[point.camera_id]) >= 12, point  # a filled disc, not a line
    # ... and nowhere else: a camera's colour covers its discs (~95 px each at 8 pt) and one legend disc, no more.
    for camera, colour in colours.items():
        discs = sum(1 for p in assessed if p.camera_id == camera) + 1
        assert 50 * discs < np.all(pixels == rgb(colour), axis=-1).sum() < 120 * discs, camera

    # Batches without a verdict (invalid output, rejected, never assessed): a black cross under the 0 line.
    failed = [p for p in points if p.risk_score is None]
    assert {p.status for p in failed} == {"invalid_output", "llm_rejected", "unassessed"}
    for point in failed:
        row, column = to_pixel(DAY, point.started_at, NOT_ASSESSED_Y)
        assert near(pixels, row, column, NOT_ASSESSED_COLOUR, radius=1) >= 3, point

    assert metadata["batches"] == len(points) == 18
    assert metadata["assessed"] == 15 and metadata["not_assessed"] == 3
    assert metadata["max_risk_score"] == max(processed.score_of.values()) == 91
    assert metadata["cameras"] == 3


def test_daily_summary_table_counts_per_camera(processed: ProcessedSet) -> None:
    summary = materialize_day(processed.db_path, DAY)[SUMMARY_METADATA_KEY]
    rows = {
        cells[0]: cells
        for line in summary.splitlines()
        if line.startswith("| ") and not line.startswith("| camera")
        for cells in [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]]
    }
    assert set(rows) == {"backyard", "front\\_door", "garage"}
    # front_door: 12 45 91 70 8 81(fast path) + one invalid output
    assert rows["front\\_door"][:10] == [
        "front\\_door",
        "7",
        "2",
        "1",
        "2",
        "1",
        "1",
        "91",
        "51.2",
        rows["front\\_door"][9],
    ]
    assert rows["front\\_door"][9].startswith("03:00 91:")
    assert rows["garage"][1:8] == ["5", "2", "1", "1", "1", "0", "88"]
    # the camera-derived summary text cannot form markup in the table
    assert "<b>" not in summary and "\\<b\\>" in summary and "a car \\| stopped" in summary


def test_a_day_without_batches_still_draws_an_empty_timeline(processed: ProcessedSet, tmp_path: Path) -> None:
    metadata = materialize_day(processed.db_path, DAY + timedelta(days=1))
    assert metadata["batches"] == 0 and metadata["max_risk_score"] is None
    pixels = decode_png(metadata[TIMELINE_METADATA_KEY])
    assert pixels.shape == (SIZE_PX[1], SIZE_PX[0], 3)
    assert np.all(pixels == rgb(BAND_COLOURS["critical"]), axis=-1).mean() > 0.04
    # no database at all (nothing ingested yet): an empty day too, not a failure
    assert materialize_day(tmp_path / "absent.duckdb", DAY)["batches"] == 0


@pytest.mark.parametrize(
    ("at", "days"),
    [
        (datetime(2026, 11, 15, 0, 5, tzinfo=UTC), ["2026-11-14", "2026-11-15"]),
        (datetime(2026, 11, 15, 13, 5, tzinfo=UTC), ["2026-11-15"]),
    ],
)
def test_schedule_redraws_today_and_finishes_yesterday_after_midnight(at: datetime, days: list[str]) -> None:
    definitions = dg.Definitions(
        assets=[risk_timeline],
        jobs=[risk_timeline_job],
        schedules=[risk_timeline_schedule],
        resources={"duckdb": HsiDuckDBResource(database="unused.duckdb")},
    )
    context = dg.build_schedule_context(scheduled_execution_time=at, repository_def=definitions.get_repository_def())
    requests = risk_timeline_schedule.evaluate_tick(context).run_requests or []
    assert [r.partition_key for r in requests] == days
    assert len({r.run_key for r in requests}) == len(days)
