"""DuckDB access for assets, sensors and jobs: dagster-duckdb's resource, plus the lock file and migrations."""

from collections.abc import Iterator
from contextlib import contextmanager

import duckdb
from dagster_duckdb import DuckDBResource
from pydantic import Field

from hsi_dagster.settings import HsiSettings
from hsi_dagster.storage.db import LOCK_WAIT_SECONDS, connect


class HsiDuckDBResource(DuckDBResource):
    """The project database (HSI_DUCKDB_PATH). Connections are short: open, one transaction, close.

    DuckDB admits one read-write process per file, so a step never keeps a connection across an LLM call, and
    `get_connection` queues on the file's lock (`<db>.lock`, storage/db.py) behind other processes' connections (up
    to `lock_wait_seconds`, then DatabaseBusy naming the file) instead of colliding with them.
    """

    lock_wait_seconds: float = Field(
        default=LOCK_WAIT_SECONDS, description="How long to queue behind other processes' connections to the file."
    )

    @classmethod
    def from_settings(cls, settings: HsiSettings) -> "HsiDuckDBResource":
        return cls(database=settings.HSI_DUCKDB_PATH)

    @contextmanager
    def get_connection(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """dagster-duckdb's `with duckdb.get_connection() as conn`, closed on exit.

        Read-write: the file (and its folder) is created if needed and migrated to the latest schema.
        Read-only (sensors, reports): never migrates and never creates the file; a file that does not exist yet
        raises `storage.db.DatabaseNotFound` (nothing has been ingested), which callers treat as "nothing to do".
        In a process that already holds the file read-write DuckDB shares that instance, so the connection is then
        read-write too (DuckDB cannot open one file in two modes in one process).
        """
        with connect(
            self.database, read_only=read_only, wait_seconds=self.lock_wait_seconds, config=self.connection_config
        ) as conn:
            yield conn
