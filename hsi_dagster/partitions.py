"""One dynamic partition per batch window (`batch_id`), added by the batch-window sensor or `hsi process`."""

import dagster as dg

BATCH_PARTITIONS_NAME = "batches"
batch_partitions = dg.DynamicPartitionsDefinition(name=BATCH_PARTITIONS_NAME)

# One partition per calendar day (UTC) for the daily reports; the current day is included (end_offset=1) so that
# today's timeline can be drawn before the day is over.
TIMELINE_START_DATE = "2025-01-01"
daily_partitions = dg.DailyPartitionsDefinition(start_date=TIMELINE_START_DATE, timezone="UTC", end_offset=1)

# Concurrency pools: one step per llama-server slot across all runs; one bulk DuckDB writer at a time.
LLAMA_SLOTS_POOL = "llama_slots"
DUCKDB_WRITES_POOL = "duckdb_writes"
