#!/bin/sh
# Entry point of the hsi images (Dagster services, run containers, the CPU llama-server): fail at start, naming the
# setting, rather than run with defaults or hang.
#   - HSI_ENV_FILE must name a readable file: every service reads its settings from that one hsi.env (a missing
#     file would otherwise be silently skipped and the defaults used).
#   - DAGSTER_PG_HOST (when set): Postgres must accept connections within DAGSTER_PG_WAIT_SECONDS (default 60);
#     the container then exits and its restart policy tries again. Queued runs stay in Postgres meanwhile.
set -eu

env_file="${HSI_ENV_FILE:-}"
if [ -z "$env_file" ]; then
    echo "error: HSI_ENV_FILE is not set: point it at the stack's hsi.env" >&2
    exit 2
fi
if [ ! -e "$env_file" ]; then
    echo "error: HSI_ENV_FILE=$env_file: no such file (mount the stack's hsi.env there)" >&2
    exit 2
fi
if [ ! -r "$env_file" ] || [ -d "$env_file" ]; then
    echo "error: HSI_ENV_FILE=$env_file is not a file readable by uid $(id -u)" >&2
    exit 2
fi

if [ -n "${DAGSTER_PG_HOST:-}" ]; then
    python3 - <<'PY'
import os
import socket
import sys
import time

host, port = os.environ["DAGSTER_PG_HOST"], int(os.environ.get("DAGSTER_PG_PORT") or 5432)
wait = float(os.environ.get("DAGSTER_PG_WAIT_SECONDS") or 60)
deadline, problem = time.monotonic() + wait, "no attempt"
while True:
    try:
        socket.create_connection((host, port), timeout=3).close()
        sys.exit(0)
    except OSError as exc:
        problem = str(exc) or type(exc).__name__
    if time.monotonic() >= deadline:
        break
    time.sleep(1)
print(
    f"error: DAGSTER_PG_HOST={host}: Postgres does not answer on {host}:{port} after {wait:g} s ({problem}); "
    "queued runs wait in the queue until it does",
    file=sys.stderr,
)
sys.exit(3)
PY
fi

exec "$@"
