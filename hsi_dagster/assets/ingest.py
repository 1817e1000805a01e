"""`detections`: JSON Lines files validated and bulk-loaded into DuckDB; bad records to quarantine."""

import dagster as dg

from hsi_dagster.partitions import DUCKDB_WRITES_POOL
from hsi_dagster.resources import HsiDuckDBResource, PipelineSettingsResource
from hsi_dagster.storage.ingest import ingest_files


class IngestConfig(dg.Config):
    paths: list[str]


@dg.asset(group_name="ingest", kinds={"duckdb"}, pool=DUCKDB_WRITES_POOL)
def detections(
    context: dg.AssetExecutionContext,
    config: IngestConfig,
    duckdb: HsiDuckDBResource,
    pipeline_settings: PipelineSettingsResource,
) -> dg.MaterializeResult:
    """Detections from camera object detectors (contract section 1); each record loaded once or quarantined."""
    with duckdb.get_connection() as conn:
        report = ingest_files(conn, config.paths, settings=pipeline_settings.get(), skip_already_ingested=True)
    context.log.info(report.summary())
    return dg.MaterializeResult(
        metadata={
            "files": dg.MetadataValue.json(list(config.paths)),
            "loaded": report.loaded,
            "duplicates_skipped": report.duplicates,
            "quarantined": report.quarantined,
            "cut_to_bounds": report.cut,  # loaded with optional enrichment cut to an INGEST_* bound
            "elapsed_s": round(report.elapsed_s, 3),
        }
    )
