#!/bin/sh
# One-shot set-up of the stack, run as root in the hsi-dagster image before the Dagster services start
# (docker-compose.prod.yml's dagster-init; the test stack runs the same): usage `hsi-stack-init SOURCE_ENV_FILE`.
#   1. copies the settings file into the hsi_config volume (/run/hsi/hsi.env, owner dagster, mode 0640: run
#      containers read it, they only get the env_vars that deploy/dagster.yaml lists; the CPU llama-server joins
#      group 10002 to read it too);
#   2. migrates the instance's Postgres storage;
#   3. sets the pools from the settings: llama_slots = PARALLEL x servers in LLAMA_SERVER_URL, duckdb_writes = 1
#      (a yaml file cannot read hsi.env). Run it again after changing PARALLEL or the servers.
set -eu
source_file="${1:?usage: hsi-stack-init SOURCE_ENV_FILE}"
if [ ! -r "$source_file" ]; then
    echo "error: $source_file (the stack's hsi.env) is missing or unreadable" >&2
    exit 2
fi
install -o 10002 -g 10002 -m 0640 "$source_file" /run/hsi/hsi.env
export HSI_ENV_FILE=/run/hsi/hsi.env
dagster instance migrate
python3 -c '
import dagster as dg
from hsi_dagster.cli.instance import apply_pool_limits
from hsi_dagster.settings import load_settings

settings = load_settings()
with dg.DagsterInstance.get() as instance:
    apply_pool_limits(instance, settings)
print(f"llama_slots = {settings.PARALLEL} x {len(settings.llm_urls)} server(s): {settings.llm_urls}")
'
