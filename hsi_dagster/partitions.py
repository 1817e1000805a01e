"""One dynamic partition per batch window (`batch_id`), added by the batch-window sensor or `hsi process`."""

import dagster as dg

BATCH_PARTITIONS_NAME = "batches"
batch_partitions = dg.DynamicPartitionsDefinition(name=BATCH_PARTITIONS_NAME)
