"""Where every ingested detection ended, for the reliability matrix (docs/RELIABILITY.md): the columns of its table.

"Lost": a detection in neither an assessed batch (a batch with a risk_assessments row) nor quarantine.
"Duplicates": a detection recorded in more than one batch, plus any batch with more than one row in a stage table.
Reads through storage.db.connect (read-only, under the lock file), like every other reader.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from hsi_dagster.storage.db import connect

STAGE_TABLES = ("detection_batches", "enriched_contexts", "budgeted_prompts", "risk_assessments")


@dataclass(frozen=True)
class Ledger:
    detections_in: int  # loaded detections + quarantined lines
    batches: int
    assessments: int
    quarantined: int
    lost: int
    duplicates: int

    def row(self) -> dict[str, int]:
        return asdict(self)

    def assert_complete(self) -> None:
        """Every detection in exactly one assessed batch or in quarantine, no duplicate rows."""
        assert self.lost == 0 and self.duplicates == 0, self
        assert self.assessments == self.batches, self


def counts(db: str, queries: dict[str, str]) -> dict[str, int]:
    """Each named `SELECT count(...)` run on the database, read-only."""
    with connect(db, read_only=True) as conn:
        return {name: int((conn.execute(sql).fetchone() or (0,))[0] or 0) for name, sql in queries.items()}


def ledger(db: str) -> Ledger:
    with connect(db, read_only=True) as conn:

        def one(sql: str) -> int:
            row = conn.execute(sql).fetchone()
            return int(row[0] or 0) if row else 0

        loaded = one("SELECT count(*) FROM detections")
        quarantined = one("SELECT count(*) FROM quarantine")
        assessed_ids = """
            SELECT DISTINCT unnest(b.detection_ids) AS detection_id
            FROM detection_batches b JOIN risk_assessments r USING (batch_id)
        """
        lost = one(f"SELECT count(*) FROM detections WHERE detection_id NOT IN ({assessed_ids})")
        in_two_batches = one(
            "SELECT count(*) FROM (SELECT detection_id, count(*) AS n FROM "
            "(SELECT unnest(detection_ids) AS detection_id FROM detection_batches) GROUP BY 1) WHERE n > 1"
        )
        extra_rows = sum(one(f"SELECT count(*) - count(DISTINCT batch_id) FROM {table}") for table in STAGE_TABLES)
        return Ledger(
            detections_in=loaded + quarantined,
            batches=one("SELECT count(*) FROM detection_batches"),
            assessments=one("SELECT count(*) FROM risk_assessments"),
            quarantined=quarantined,
            lost=lost,
            duplicates=in_two_batches + extra_rows,
        )
