"""The SQL half of the ingest's fast path: the lines msgspec accepted (`core/intake/fast_check.py`) parsed once more, in
bulk, by DuckDB, which also does the checks that are cheaper vectorized than per line in Python: the camera_id
pattern, no control characters in ids, labels and tags, the ts pattern and range, the bbox order."""

from __future__ import annotations

from hsi_dagster.core.intake.detections import CAMERA_ID_PATTERN, TS_MAX, TS_MIN, TS_PATTERN

_CONTROL = "'[\\x00-\\x1F\\x7F]'"
_FIELDS = {
    "detection_id": "VARCHAR",
    "camera_id": "VARCHAR",
    "ts": "VARCHAR",
    "label": "VARCHAR",
    "confidence": "DOUBLE",
    "bbox": "DOUBLE[]",
    "track_id": "VARCHAR",
    "zone": "VARCHAR",
    "enrichment": "JSON",
}
_STRUCTURE = "{" + ", ".join(f'"{name}": "{kind}"' for name, kind in _FIELDS.items()) + "}"
_FINISH_CHECKS = [
    "j IS NOT NULL",
    f"regexp_full_match(j.camera_id, '{CAMERA_ID_PATTERN}')",
    f"NOT regexp_matches(j.detection_id, {_CONTROL}) AND NOT regexp_matches(j.label, {_CONTROL})",
    f"(j.track_id IS NULL OR NOT regexp_matches(j.track_id, {_CONTROL}))",
    f"(j.zone IS NULL OR NOT regexp_matches(j.zone, {_CONTROL}))",
    f"regexp_full_match(j.ts, '{TS_PATTERN}')",
    f"ts >= TIMESTAMPTZ '{TS_MIN.isoformat()}' AND ts < TIMESTAMPTZ '{TS_MAX.isoformat()}'",
    "(j.bbox IS NULL OR (j.bbox[1] < j.bbox[3] AND j.bbox[2] < j.bbox[4]))",
]


def finish_sql(relation: str) -> str:
    """SELECT over `relation(line_no, pos, line)` of accepted lines: their typed values and `ok`, false where a
    check left to SQL fails (those lines go to the validator too; `try` keeps one odd line from failing them all)."""
    ok = " AND ".join(f"coalesce({check}, false)" for check in _FINISH_CHECKS)
    return f"""
SELECT line_no, pos, j.detection_id AS detection_id, j.camera_id AS camera_id, ts, j.label AS label,
       j.confidence AS confidence, j.bbox AS bbox, j.track_id AS track_id, j.zone AS zone,
       CASE WHEN j.enrichment::VARCHAR <> 'null' THEN j.enrichment END AS enrichment, {ok} AS ok
FROM (SELECT *, TRY_CAST(upper(j.ts) AS TIMESTAMPTZ) AS ts
      FROM (SELECT line_no, pos, try(from_json(line, '{_STRUCTURE}')) AS j FROM {relation}))
"""
