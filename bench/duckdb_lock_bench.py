"""What the lock file of storage/db.py costs per connection: `connect` (flock on `<db>.lock`, then DuckDB) against
DuckDB alone (`open_connection`, no lock), for read-only and read-write connections, one process, no contention.

    .venv/bin/python bench/duckdb_lock_bench.py [--n 300]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from hsi_dagster.storage.db import connect, open_connection
from hsi_dagster.storage.schema import migrate


def _time(n: int, open_once) -> list[float]:
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        open_once()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300, help="connections per variant")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "hsi.duckdb")
        with connect(db):
            pass

        def locked(read_only: bool):
            def once() -> None:
                with connect(db, read_only=read_only) as conn:
                    conn.execute("SELECT 1").fetchone()

            return once

        def bare(read_only: bool):
            def once() -> None:
                conn = open_connection(db, read_only=read_only)
                try:
                    if not read_only:
                        migrate(conn)
                    conn.execute("SELECT 1").fetchone()
                finally:
                    conn.close()

            return once

        for read_only in (True, False):
            mode = "read-only " if read_only else "read-write"
            _time(20, bare(read_only))  # warm up
            plain = statistics.median(_time(args.n, bare(read_only)))
            with_lock = statistics.median(_time(args.n, locked(read_only)))
            print(
                f"{mode}: median open+SELECT 1+close {plain:.3f} ms without the lock file, {with_lock:.3f} ms with it "
                f"(+{with_lock - plain:.3f} ms, n={args.n})"
            )


if __name__ == "__main__":
    main()
