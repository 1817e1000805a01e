#!/bin/sh
# First start: create the cluster with POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB (as the official image
# does), password authentication for every network client. Every start: run postgres in the foreground (PID 1).
set -eu

if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "error: POSTGRES_PASSWORD is not set (the Dagster services connect with DAGSTER_PG_PASSWORD: set both)" >&2
    exit 2
fi
user="${POSTGRES_USER:-postgres}"
db="${POSTGRES_DB:-$user}"

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pwfile="$(mktemp)"
    printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
    initdb --pgdata="$PGDATA" --username="$user" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 \
        --encoding=UTF8 --locale=C.UTF-8 >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    if [ "$db" != "postgres" ]; then
        pg_ctl --pgdata="$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
        createdb --username="$user" "$db"
        pg_ctl --pgdata="$PGDATA" -m fast -w stop >/dev/null
    fi
fi

exec postgres -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories=/var/run/postgresql
