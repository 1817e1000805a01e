"""`risk_timeline`: one picture per day of what the cameras' batches scored, for a person to look at."""

import base64

import dagster as dg

from hsi_dagster.assets.assessments import risk_assessments
from hsi_dagster.core.outbound.timeline import daily_summary_markdown, render_timeline_png
from hsi_dagster.partitions import daily_partitions
from hsi_dagster.resources import HsiDuckDBResource
from hsi_dagster.storage.db import DatabaseNotFound
from hsi_dagster.storage.timeline import risk_points_between

TIMELINE_METADATA_KEY = "timeline"
SUMMARY_METADATA_KEY = "daily_summary"


@dg.asset(
    partitions_def=daily_partitions,
    # Each day reads whichever batch partitions started on it; the mapping says "any of them", not one by one.
    deps=[dg.AssetDep(risk_assessments, partition_mapping=dg.AllPartitionMapping())],
    group_name="reports",
    kinds={"duckdb", "matplotlib"},
)
def risk_timeline(context: dg.AssetExecutionContext, duckdb: HsiDuckDBResource) -> dg.MaterializeResult:
    """Risk scores of the day per camera over the low/medium/high/critical bands (a PNG in the metadata, shown by
    the UI) and a markdown table per camera. Read-only: it never blocks the pipeline's writers for long."""
    window = context.partition_time_window
    try:
        with duckdb.get_connection(read_only=True) as conn:
            points = risk_points_between(conn, window.start, window.end)
    except DatabaseNotFound:
        points = []  # nothing ingested yet: an empty day, drawn as such
    png = render_timeline_png(points, window.start, window.end)
    summary = daily_summary_markdown(points, window.start)
    scores = [p.risk_score for p in points if p.risk_score is not None]
    image = base64.b64encode(png).decode("ascii")
    context.log.info(
        f"day {context.partition_key}: {len(points)} batches, {len(scores)} assessed, timeline PNG {len(png)} bytes"
    )
    return dg.MaterializeResult(
        metadata={
            TIMELINE_METADATA_KEY: dg.MetadataValue.md(
                f"![risk timeline {context.partition_key}](data:image/png;base64,{image})"
            ),
            SUMMARY_METADATA_KEY: dg.MetadataValue.md(summary),
            "batches": len(points),
            "assessed": len(scores),
            "not_assessed": len(points) - len(scores),
            "cameras": len({p.camera_id for p in points}),
            "max_risk_score": max(scores) if scores else None,
            "png_bytes": len(png),
        }
    )
