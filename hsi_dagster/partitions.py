"""One dynamic partition per batch window (`batch_id`), added by the batch-window sensor or `hsi process`."""

import dagster as dg

BATCH_PARTITIONS_NAME = "batches"
batch_partitions = dg.DynamicPartitionsDefinition(name=BATCH_PARTITIONS_NAME)

# Concurrency pools: one step per llama-server slot across all runs; one bulk DuckDB writer at a time.
LLAMA_SLOTS_POOL = "llama_slots"
DUCKDB_WRITES_POOL = "duckdb_writes"
