"""`enriched_contexts`: what the vision models saw in a batch, deduplicated and filtered, at the chosen quality."""

import time
from datetime import UTC, datetime

import dagster as dg

from hsi_dagster.assets.baselines import batch_history, camera_baselines, history_metadata
from hsi_dagster.assets.batches import detection_batches
from hsi_dagster.assets.visits import link_into_visit, stored_visit_metadata
from hsi_dagster.core.context.history import HistoryRules
from hsi_dagster.core.context.sections import QUALITY_LEVEL_TYPES
from hsi_dagster.partitions import batch_partitions
from hsi_dagster.resources import EnrichmentResource, HsiDuckDBResource, PipelineSettingsResource
from hsi_dagster.steps import context_for_batch
from hsi_dagster.storage.batches import load_batch
from hsi_dagster.storage.corrections import corrected_batches
from hsi_dagster.storage.frigate import reviews_covering
from hsi_dagster.storage.pipeline_tables import save_context


@dg.asset(
    partitions_def=batch_partitions,
    deps=[detection_batches, camera_baselines],  # lineage only: the batch job does not wait for camera_baselines
    group_name="pipeline",
    kinds={"duckdb"},
)
def enriched_contexts(
    context: dg.AssetExecutionContext,
    duckdb: HsiDuckDBResource,
    enrichment: EnrichmentResource,
    pipeline_settings: PipelineSettingsResource,
) -> dg.MaterializeResult:
    """Detections summary, scene and one section per enrichment type; types late past the time limit are listed;
    with HISTORY_ENABLED, what this camera usually sees at this hour and what the other cameras saw just before."""
    settings = pipeline_settings.get()
    profiles = pipeline_settings.camera_profiles()
    history, history_s = None, 0.0
    with duckdb.get_connection() as conn:
        batch, batch_detections = load_batch(conn, context.partition_key)
        reviews = reviews_covering(conn, batch["camera_id"], batch["started_at"], batch["last_ts"])
        corrected = (
            corrected_batches(conn, batch["camera_id"], datetime.now(UTC)) if settings.PROMPT_HOUSEHOLD_EXAMPLES else []
        )
        if settings.HISTORY_ENABLED:
            started = time.perf_counter()
            history = batch_history(conn, batch, batch_detections, profiles, HistoryRules.from_settings(settings))
            history_s = time.perf_counter() - started
    types = QUALITY_LEVEL_TYPES[settings.ENRICHMENT_QUALITY_LEVEL]
    fetched = enrichment.fetch(batch, batch_detections, types)
    for error in fetched.errors:
        context.log.warning(f"batch {context.partition_key}: enrichment: {error}")
    enriched = context_for_batch(
        batch,
        fetched.detections,
        settings,
        camera_profile=profiles.get(batch["camera_id"]),
        missing_types=fetched.missing_types,
        history=history,
        reviews=reviews,
        corrected=corrected,
    )
    with duckdb.get_connection() as conn:
        save_context(
            conn,
            context.partition_key,
            enriched.to_json(),
            settings.ENRICHMENT_QUALITY_LEVEL,
            list(fetched.missing_types),
        )
        visit, why = link_into_visit(conn, enriched, profiles.get(batch["camera_id"]), settings, profiles=profiles)
        visit_columns = stored_visit_metadata(conn, visit, why)
    return dg.MaterializeResult(
        metadata={
            "camera_id": batch["camera_id"],
            "quality_level": settings.ENRICHMENT_QUALITY_LEVEL,
            "types_included": ", ".join(enriched.types_included),
            "missing_enrichment": ", ".join(fetched.missing_types) or "none",
            "enrichment_s": round(fetched.elapsed_s, 3),
            "history_s": round(history_s, 4),
            "frigate_reviews": len(enriched.reviews),
            "household_examples": len(enriched.household_examples),
            **history_metadata(history),
            **visit_columns,
        }
    )
