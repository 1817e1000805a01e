"""The pipeline's assets, in lineage order: detections -> detection_batches -> enriched_contexts ->
budgeted_prompts -> risk_assessments. Each stage's rows live in DuckDB; Dagster records lineage and metadata."""
