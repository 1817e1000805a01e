"""DuckDB access for Dagster steps: dagster-duckdb's resource, plus the migration and lock-wait we need."""

from collections.abc import Iterator
from contextlib import contextmanager

import duckdb
from dagster_duckdb import DuckDBResource

from hsi_dagster.storage.db import open_connection
from hsi_dagster.storage.schema import migrate


class HsiDuckDBResource(DuckDBResource):
    """The project database (HSI_DUCKDB_PATH). Connections are short: open, one transaction, close.

    DuckDB admits one read-write process per file, so a step never keeps a connection across an LLM call;
    `connection()` waits out another process's lock instead of failing.
    """

    @contextmanager
    def connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        conn = open_connection(self.database)
        try:
            migrate(conn)
            yield conn
        finally:
            conn.close()
