#!/bin/sh
# Entry point of the hsi images (Dagster services, run containers, the CPU llama-server): fail at start, naming the
# setting, rather than run with defaults or hang.
#   - HSI_ENV_FILE must name a readable file: every service reads its settings from that one hsi.env (a missing
#     file would otherwise be silently skipped and the defaults used).
#   - DAGSTER_PG_HOST (when set): Postgres must answer a query as DAGSTER_PG_USERNAME within
#     DAGSTER_PG_WAIT_SECONDS (default 60; run containers get 240 from deploy/dagster.yaml); the container then exits
#     and its restart policy tries again. Queued runs stay in Postgres meanwhile. A login, not a TCP connect: a
#     Postgres that is shutting down or starting accepts TCP connections and refuses every session, and a run
#     container that got past a TCP check then failed creating its Dagster instance and was left STARTING.
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
try:
    import psycopg2  # the hsi-dagster image has it (dagster-postgres); elsewhere a TCP connect is the check
except ImportError:
    psycopg2 = None


def answers() -> None:
    """Raises unless Postgres accepts a session of the stack's user and answers a query."""
    if psycopg2 is None:
        socket.create_connection((host, port), timeout=3).close()
        return
    conn = psycopg2.connect(
        host=host, port=port, user=os.environ.get("DAGSTER_PG_USERNAME"),
        password=os.environ.get("DAGSTER_PG_PASSWORD"), dbname=os.environ.get("DAGSTER_PG_DB"), connect_timeout=3,
    )
    try:
        conn.cursor().execute("SELECT 1")
    finally:
        conn.close()


# Refusals that waiting does not cure: the settings are wrong, say which.
SETTINGS_AT_FAULT = {
    "password authentication failed": "DAGSTER_PG_USERNAME / DAGSTER_PG_PASSWORD",
    "no password supplied": "DAGSTER_PG_PASSWORD",
    "does not exist": "DAGSTER_PG_USERNAME / DAGSTER_PG_DB",
}
deadline, problem = time.monotonic() + wait, "no attempt"
while True:
    try:
        answers()
        sys.exit(0)
    except Exception as exc:  # OSError, psycopg2.Error: Postgres does not answer yet, or refuses
        problem = " ".join(str(exc).split()) or type(exc).__name__
    for marker, settings in SETTINGS_AT_FAULT.items():
        if marker in problem:
            print(f"error: {settings}: Postgres at {host}:{port} refuses the stack's login ({problem})", file=sys.stderr)
            sys.exit(3)
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
