"""Frigate input into DuckDB: recorded or live payloads -> contract detections through the ingest path.

`load_frigate_messages` maps each payload with `core.frigate.mapping` (the state policy, bbox normalisation, identities,
captions), validates the records with the contract's validator and loads them with `ingest_numbered_lines`: the
same quarantine (the original payload, its line number, a reason naming the Frigate field) and the same
idempotency by detection_id. Payloads that are no detection (false positives, unchanged updates, reviews) are
counted, not stored. The last state of each tracked object is kept in `frigate_tracks` for the GenAI
descriptions that arrive after it.

Line numbers: a file's line (JSON Lines) or item (a JSON array as `/api/events` returns it); for a live source
(an MQTT broker, a Frigate server) the message's number on that source, reserved in `frigate_sources` before the
write, so numbers never repeat across restarts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from hsi_dagster.core.frigate.fields import Resolution
from hsi_dagster.core.frigate.mapping import (
    SKIP_FALSE_POSITIVE,
    SKIP_NOT_A_DETECTION,
    SKIP_UNCHANGED,
    Emit,
    Invalid,
    Outcome,
    Skip,
    Track,
    TrackDetection,
    map_api_event,
    map_description,
    map_event,
    payload_kind,
    split_topic,
    to_detection,
    track_from_event,
)
from hsi_dagster.core.frigate.reviews import Review, map_review, map_review_item
from hsi_dagster.core.intake.detections import (
    DEFAULT_BOUNDS,
    Bounds,
    Rejection,
    format_ts,
    loads_enrichment,
    truncate_raw,
)
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.ingest import IngestError, ingest_numbered_lines

OPEN_REVIEW_SECONDS = 300  # a review without its end yet (or whose end was lost) covers this long after its start
MAX_PAYLOAD_BYTES = 256 * 1024  # one MQTT payload or API item; Frigate's are a few KiB (path_data grows them)


@dataclass(frozen=True)
class FrigateMessage:
    """One payload to map: its line (or item, or message) number, its raw text, its MQTT topic when known."""

    line_no: int
    raw: str | bytes
    topic: str | None = None
    kind: str | None = None  # known kind (`api_event`, `api_review` for an API answer), else by topic or shape


@dataclass
class FrigateReport:
    """What one file, or one batch of live messages, contributed."""

    source: str
    messages: int = 0
    detections: int = 0  # loaded now
    duplicates: int = 0  # mapped to a detection already stored (a redelivery, a re-import)
    false_positives: int = 0
    unchanged: int = 0  # periodic updates of an unchanged object (state policy)
    ignored: int = 0  # reviews, non-description object updates, other topics
    quarantined: int = 0
    joined: int = 0  # late descriptions added to their track's recorded batch
    rejudged: int = 0  # recorded batches asked to be judged again for them
    reviews: int = 0  # review messages stored (frigate_reviews)
    reviews_without_detections: int = 0  # of those, reviews no stored detection of their camera falls in (kept)

    def add(self, other: FrigateReport) -> None:
        for name in (
            "messages",
            "detections",
            "duplicates",
            "false_positives",
            "unchanged",
            "ignored",
            "quarantined",
            "joined",
            "rejudged",
            "reviews",
            "reviews_without_detections",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def summary(self) -> str:
        late = (
            f", {self.joined} late descriptions joined their batch ({self.rejudged} judged again)"
            if self.joined
            else ""
        )
        reviews = (
            f", {self.reviews} review messages stored ({self.reviews_without_detections} with no detection)"
            if self.reviews
            else ""
        )
        return (
            f"{self.source}: {self.messages} payloads, {self.detections} detections loaded, "
            f"{self.duplicates} already stored, {self.unchanged} unchanged updates skipped, "
            f"{self.false_positives} false positives skipped, {self.ignored} not detections, "
            f"{self.quarantined} quarantined{late}{reviews}"
        )


_SKIP_COUNTERS = {SKIP_FALSE_POSITIVE: "false_positives", SKIP_UNCHANGED: "unchanged", SKIP_NOT_A_DETECTION: "ignored"}


# ------------------------------------------------------------------------------------------------ tracks
def _stored_tracks(conn: duckdb.DuckDBPyConnection, ids: Sequence[str]) -> dict[str, Track]:
    if not ids:
        return {}
    rows = conn.execute(
        "SELECT track_id, camera_id, label, confidence, last_seen FROM frigate_tracks "
        "WHERE list_contains($ids, track_id)",
        {"ids": list(ids)},
    ).fetchall()
    return {row[0]: Track(*row) for row in rows}


def _save_tracks(conn: duckdb.DuckDBPyConnection, tracks: Iterable[Track]) -> None:
    """Upsert, keeping the latest state (idempotent: replaying older payloads changes nothing)."""
    rows = [(t.track_id, t.camera_id, t.label, t.confidence, t.last_seen) for t in tracks]
    if rows:
        conn.executemany(
            """INSERT INTO frigate_tracks (track_id, camera_id, label, confidence, last_seen) VALUES (?, ?, ?, ?, ?)
               ON CONFLICT (track_id) DO UPDATE SET camera_id = excluded.camera_id, label = excluded.label,
                   confidence = excluded.confidence, last_seen = excluded.last_seen
               WHERE excluded.last_seen > frigate_tracks.last_seen""",
            rows,
        )


def _stored_latest(conn: duckdb.DuckDBPyConnection, ids: Sequence[str]) -> dict[str, TrackDetection]:
    """The latest stored detection (not a description) of each track: where a description of it belongs."""
    if not ids:
        return {}
    rows = conn.execute(
        """SELECT track_id, detection_id, ts, label, confidence, zone, enrichment FROM detections
           WHERE list_contains($ids, track_id) AND detection_id NOT LIKE 'frigate:%:description:%'
           QUALIFY row_number() OVER (PARTITION BY track_id ORDER BY ts DESC, detection_id DESC) = 1""",
        {"ids": list(ids)},
    ).fetchall()
    found = {}
    for track_id, detection_id, ts, label, confidence, zone, enrichment in rows:
        record = {
            "detection_id": detection_id,
            "ts": format_ts(ts),
            "label": label,
            "confidence": confidence,
            "zone": zone,
            "enrichment": loads_enrichment(enrichment),
        }
        found[track_id] = TrackDetection.from_record(record)
    return found


def join_recorded_batches(conn: duckdb.DuckDBPyConnection, track_ids: Sequence[str]) -> tuple[int, int]:
    """Descriptions of these tracks not in a batch whose detection (`enrichment.frigate.follows`) is in a recorded
    batch: each is added to that batch (its ts lies in the batch's window), and the batch, if a context of it was
    already built, is asked to be judged again (`batch_rejudgements`; storage.pipeline_tables.unassessed_batches
    lists it until a newer context and assessment are stored). Idempotent. Returns (descriptions added, batches
    asked to be judged again)."""
    if not track_ids:
        return 0, 0
    rows = conn.execute(
        """SELECT d.detection_id, t.batch_id, EXISTS (SELECT 1 FROM enriched_contexts c WHERE c.batch_id = t.batch_id)
           FROM detections d
           JOIN detections t ON t.detection_id = d.enrichment->>'$.frigate.follows' AND t.track_id = d.track_id
           JOIN detection_batches b ON b.batch_id = t.batch_id
           WHERE d.batch_id IS NULL AND list_contains($ids, d.track_id)
             AND d.detection_id LIKE 'frigate:%:description:%'
             AND d.ts BETWEEN b.started_at AND b.last_ts
           ORDER BY d.ts, d.detection_id""",
        {"ids": list(track_ids)},
    ).fetchall()
    batches: dict[str, bool] = {}
    for detection_id, batch_id, judged in rows:
        conn.execute(
            "UPDATE detections SET batch_id = $batch WHERE detection_id = $id AND batch_id IS NULL",
            {"batch": batch_id, "id": detection_id},
        )
        batches[batch_id] = batches.get(batch_id, False) or bool(judged)
    for batch_id, judged in batches.items():
        conn.execute(
            """UPDATE detection_batches SET
                   detection_ids = (SELECT list(detection_id ORDER BY ts, detection_id) FROM detections
                                    WHERE batch_id = $batch),
                   labels = (SELECT list(label ORDER BY ts, detection_id) FROM detections WHERE batch_id = $batch),
                   detection_count = (SELECT count(*) FROM detections WHERE batch_id = $batch),
                   has_late = has_late OR (SELECT coalesce(bool_or(is_late), false) FROM detections
                                           WHERE batch_id = $batch)
               WHERE batch_id = $batch""",
            {"batch": batch_id},
        )
        if judged:
            conn.execute(
                """INSERT INTO batch_rejudgements (batch_id, reason, requested_at)
                   VALUES ($batch, 'a late Frigate description joined the batch', now())
                   ON CONFLICT (batch_id) DO UPDATE
                   SET reason = excluded.reason, requested_at = excluded.requested_at""",
                {"batch": batch_id},
            )
    return len(rows), sum(batches.values())


# ------------------------------------------------------------------------------------------------ reviews
def _ts(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def save_reviews(conn: duckdb.DuckDBPyConnection, reviews: Sequence[Review], source: str) -> int:
    """Upsert review items, merging a review's messages whatever their order (a redelivered older `update` keeps the
    GenAI summary, the end time and the `alert` severity a later message set). Returns how many of them no stored
    detection of their camera falls in (kept all the same: Frigate saw something hsi has no detection of)."""
    for review in reviews:
        conn.execute(
            """INSERT INTO frigate_reviews (review_id, camera_id, start_time, end_time, severity, threat_level, objects,
                                            zones, detections, summary, ignored, source, updated_at)
               VALUES ($id, $camera, $start, $end, $severity, $threat, $objects, $zones, $detections,
                       CAST($summary AS JSON), CAST($ignored AS JSON), $source, now())
               ON CONFLICT (review_id) DO UPDATE SET
                   start_time = least(frigate_reviews.start_time, excluded.start_time),
                   end_time = coalesce(greatest(frigate_reviews.end_time, excluded.end_time), frigate_reviews.end_time,
                                       excluded.end_time),
                   severity = CASE WHEN 'alert' IN (frigate_reviews.severity, excluded.severity) THEN 'alert'
                                   ELSE coalesce(excluded.severity, frigate_reviews.severity) END,
                   threat_level = coalesce(excluded.threat_level, frigate_reviews.threat_level),
                   objects = list_distinct(list_concat(frigate_reviews.objects, excluded.objects)),
                   zones = list_distinct(list_concat(frigate_reviews.zones, excluded.zones)),
                   detections = list_distinct(list_concat(frigate_reviews.detections, excluded.detections)),
                   summary = coalesce(excluded.summary, frigate_reviews.summary),
                   ignored = coalesce(excluded.ignored, frigate_reviews.ignored),
                   updated_at = excluded.updated_at""",
            {
                "id": review.review_id,
                "camera": review.camera_id,
                "start": _ts(review.start),
                "end": _ts(review.end),
                "severity": review.severity,
                "threat": review.threat_level,
                "objects": list(review.objects),
                "zones": list(review.zones),
                "detections": list(review.detections),
                "summary": json.dumps(review.summary, ensure_ascii=False) if review.summary else None,
                "ignored": json.dumps(list(review.ignored), ensure_ascii=False) if review.ignored else None,
                "source": source,
            },
        )
    ids = sorted({review.review_id for review in reviews})
    if not ids:
        return 0
    row = conn.execute(
        """SELECT count(*) FROM frigate_reviews r
           WHERE list_contains($ids, r.review_id) AND NOT EXISTS (
               SELECT 1 FROM detections d WHERE d.camera_id = r.camera_id
                   AND d.ts BETWEEN r.start_time AND coalesce(r.end_time, r.start_time + to_seconds($open)))""",
        {"ids": ids, "open": OPEN_REVIEW_SECONDS},
    ).fetchone()
    return int(row[0]) if row else 0


def reviews_covering(
    conn: duckdb.DuckDBPyConnection, camera_id: str, start: datetime, end: datetime
) -> list[dict[str, Any]]:
    """The review items of a camera whose time span overlaps [start, end] (a batch's; a review without its end yet
    spans OPEN_REVIEW_SECONDS), oldest first, `summary` parsed: what build_context's `reviews` takes."""
    cursor = conn.execute(
        """SELECT review_id, start_time, end_time, severity, threat_level, objects, zones, detections, summary
           FROM frigate_reviews
           WHERE camera_id = $camera AND start_time <= $end
               AND coalesce(end_time, start_time + to_seconds($open)) >= $start
           ORDER BY start_time, review_id""",
        {"camera": camera_id, "start": start, "end": end, "open": OPEN_REVIEW_SECONDS},
    )
    names = [d[0] for d in cursor.description]
    rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    for row in rows:
        row["summary"] = json.loads(row["summary"]) if row["summary"] else {}
    return rows


# ------------------------------------------------------------------------------------------------ loading
def _decode(message: FrigateMessage) -> tuple[str | None, Any] | str:
    """(topic, parsed payload), or the reason it cannot be read."""
    raw = message.raw
    if len(raw) > MAX_PAYLOAD_BYTES:
        return f"payload: longer than {MAX_PAYLOAD_BYTES} bytes ({len(raw)})"
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return f"payload: not valid UTF-8 (byte {exc.start}: {exc.reason})"
    else:
        text = raw
    topic, body = (message.topic, text) if message.topic is not None else split_topic(text)
    try:
        return topic, json.loads(body)
    except (ValueError, RecursionError) as exc:
        return f"payload: not valid JSON ({exc})"


def load_frigate_messages(
    conn: duckdb.DuckDBPyConnection,
    messages: Sequence[FrigateMessage],
    *,
    source: str,
    resolutions: Mapping[str, Resolution],
    bounds: Bounds = DEFAULT_BOUNDS,
) -> FrigateReport:
    """Map, validate and load a batch of payloads in order (a description may follow its events in the batch), with
    the INGEST_* `bounds` (contract section 6)."""
    report = FrigateReport(source, messages=len(messages))
    decoded = [_decode(message) for message in messages]
    kinds = [
        message.kind or payload_kind(item[1], item[0]) if isinstance(item, tuple) else ""
        for message, item in zip(messages, decoded, strict=True)
    ]
    wanted = sorted(
        {
            str(item[1].get("id"))
            for item, kind in zip(decoded, kinds, strict=True)
            if kind == "tracked_object_update" and isinstance(item, tuple) and isinstance(item[1], dict)
        }
    )
    tracks = _stored_tracks(conn, wanted)
    latest = _stored_latest(conn, wanted)
    described: set[str] = set()
    reviews: list[Review] = []
    changed: dict[str, Track] = {}
    lines: list[tuple[int, str]] = []
    rejects: list[Rejection] = []
    for message, item, kind in zip(messages, decoded, kinds, strict=True):
        if isinstance(item, str):
            rejects.append(Rejection(source, message.line_no, truncate_raw(message.raw), item))
            continue
        payload = item[1]
        outcome: Outcome
        if kind == "events":
            track = track_from_event(payload)
            if track is not None and payload["after"].get("false_positive") is not True:
                known = tracks.get(track.track_id)
                if known is None or track.last_seen >= known.last_seen:
                    tracks[track.track_id] = changed[track.track_id] = track
            outcome = map_event(payload, resolutions)
        elif kind == "tracked_object_update":
            object_id = str(payload.get("id") if isinstance(payload, dict) else None)
            outcome = map_description(payload, tracks.get(object_id), latest.get(object_id))
            if isinstance(outcome, Emit):
                described.add(object_id)
        elif kind in ("reviews", "api_review") or (
            kind == "api_event" and isinstance(payload, dict) and "severity" in payload
        ):
            review = map_review(payload) if kind == "reviews" else map_review_item(payload)  # `/api/review` items
            if isinstance(review, str):
                rejects.append(Rejection(source, message.line_no, truncate_raw(message.raw), review))
            else:
                reviews.append(review)
            continue
        elif kind == "api_event":
            outcome = map_api_event(payload)
        else:
            outcome = Skip(SKIP_NOT_A_DETECTION)
        if isinstance(outcome, Skip):
            counter = _SKIP_COUNTERS[outcome.reason]
            setattr(report, counter, getattr(report, counter) + 1)
        elif isinstance(outcome, Invalid):
            rejects.append(Rejection(source, message.line_no, truncate_raw(message.raw), outcome.reason))
        else:
            checked = to_detection(outcome, message.raw, source=source, line_no=message.line_no, bounds=bounds)
            if isinstance(checked, Rejection):
                rejects.append(checked)
            else:
                lines.append((message.line_no, checked[0]))
                record = outcome.record
                if kind == "events" and record["ts"] >= getattr(latest.get(record["track_id"]), "ts", ""):
                    latest[record["track_id"]] = TrackDetection.from_record(record)  # a later description's place
    loaded = ingest_numbered_lines(conn, lines, source=source, rejects=rejects, bounds=bounds)
    _save_tracks(conn, changed.values())
    report.joined, report.rejudged = join_recorded_batches(conn, sorted(described))
    report.reviews = len(reviews)
    report.reviews_without_detections = save_reviews(conn, reviews, source)
    report.detections = loaded.loaded
    report.duplicates = loaded.duplicates
    report.quarantined = loaded.quarantined
    return report


# ------------------------------------------------------------------------------------------------ live sources
def reserve_line_numbers(conn: duckdb.DuckDBPyConnection, source: str, count: int) -> int:
    """The first of `count` fresh message numbers of a live source (committed before the write that uses them:
    a crash in between leaves a gap, never a repeat)."""
    row = conn.execute(
        """INSERT INTO frigate_sources (source, messages, detections, duplicates, false_positives, unchanged, ignored,
                                        quarantined, updated_at)
           VALUES ($source, $count, 0, 0, 0, 0, 0, 0, now())
           ON CONFLICT (source) DO UPDATE SET messages = frigate_sources.messages + excluded.messages,
               updated_at = excluded.updated_at
           RETURNING messages""",
        {"source": source, "count": count},
    ).fetchone()
    assert row is not None
    return int(row[0]) - count + 1


def record_source_tallies(conn: duckdb.DuckDBPyConnection, report: FrigateReport) -> None:
    """Add a batch's tallies to its live source's totals (`hsi frigate` and the sensor report them)."""
    conn.execute(
        """UPDATE frigate_sources SET detections = detections + $detections, duplicates = duplicates + $duplicates,
               false_positives = false_positives + $false_positives, unchanged = unchanged + $unchanged,
               ignored = ignored + $ignored, quarantined = quarantined + $quarantined, updated_at = now()
           WHERE source = $source""",
        {
            "source": report.source,
            "detections": report.detections,
            "duplicates": report.duplicates,
            "false_positives": report.false_positives,
            "unchanged": report.unchanged,
            "ignored": report.ignored,
            "quarantined": report.quarantined,
        },
    )


def source_tallies(conn: duckdb.DuckDBPyConnection, source: str) -> dict[str, Any] | None:
    """A live source's totals (None before its first message)."""
    cursor = conn.execute("SELECT * FROM frigate_sources WHERE source = ?", [source])
    row = cursor.fetchone()
    if row is None:
        return None
    return dict(zip([d[0] for d in cursor.description], row, strict=True))


def load_live_messages(
    db: str | os.PathLike[str],
    payloads: Sequence[tuple[str | None, str | bytes]],
    *,
    source: str,
    resolutions: Mapping[str, Resolution],
    kind: str | None = None,
    bounds: Bounds = DEFAULT_BOUNDS,
) -> FrigateReport:
    """One bounded batch from a live source, in one short connection: number, map, load, tally."""
    with connect(Path(db)) as conn:
        first = reserve_line_numbers(conn, source, len(payloads))
        messages = [FrigateMessage(first + i, raw, topic, kind) for i, (topic, raw) in enumerate(payloads)]
        report = load_frigate_messages(conn, messages, source=source, resolutions=resolutions, bounds=bounds)
        record_source_tallies(conn, report)
    return report


# ------------------------------------------------------------------------------------------------ files
def _array_items(text: str, start: int) -> Iterator[tuple[int, str]]:
    """(item number, item text) of a JSON array, read item by item so a broken item is named by its number; an
    unreadable rest is yielded once as an item that fails to parse."""
    decoder = json.JSONDecoder()
    index, number = start + 1, 0
    length = len(text)
    while True:
        while index < length and text[index] in " \t\r\n":
            index += 1
        if index < length and text[index] == "]":
            return
        number += 1
        try:
            _, end = decoder.raw_decode(text, index)
        except ValueError:
            yield number, text[index:]
            return
        yield number, text[index:end]
        index = end
        while index < length and text[index] in " \t\r\n":
            index += 1
        if index < length and text[index] == ",":
            index += 1
        elif index < length and text[index] == "]":
            return
        else:
            number += 1
            yield number, text[index:] or "<end of file: the array is not closed>"
            return


def read_frigate_file(path: Path) -> list[FrigateMessage]:
    """A JSON array (`/api/events` answer; numbered by item) or JSON Lines of MQTT payloads, optionally
    `topic payload` lines as `mosquitto_sub -v` prints them (numbered by line; blank lines skipped)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise IngestError(f"cannot read {path}: {exc.strerror or exc}") from None
    text = raw.decode("utf-8", errors="surrogateescape").lstrip("\ufeff")
    stripped = len(text) - len(text.lstrip())
    if text[stripped : stripped + 1] == "[":
        return [
            FrigateMessage(number, item.encode("utf-8", "surrogateescape"), kind="api_event")
            for number, item in _array_items(text, stripped)
        ]
    return [
        FrigateMessage(number, line.encode("utf-8", "surrogateescape"))
        for number, line in enumerate(text.split("\n"), start=1)
        if line.strip()
    ]


@dataclass
class FrigateImport:
    files: list[FrigateReport] = field(default_factory=list)

    def summary(self) -> str:
        total = FrigateReport("total")
        for report in self.files:
            total.add(report)
        return "\n".join([report.summary() for report in self.files] + [total.summary()])


def import_frigate_files(
    db: str | os.PathLike[str],
    paths: Iterable[str | os.PathLike[str]],
    *,
    resolutions: Mapping[str, Resolution],
    bounds: Bounds = DEFAULT_BOUNDS,
) -> FrigateImport:
    """Load recorded Frigate files; importing a file again changes nothing (ids and line numbers are its own)."""
    resolved = [Path(p).resolve() for p in paths]
    for path in resolved:
        if not path.is_file() or not os.access(path, os.R_OK):
            raise IngestError(
                f"cannot read {path}: {'not a readable regular file' if path.exists() else 'no such file'}"
            )
    result = FrigateImport()
    with connect(Path(db)) as conn:
        for path in resolved:
            messages = read_frigate_file(path)
            result.files.append(
                load_frigate_messages(conn, messages, source=str(path), resolutions=resolutions, bounds=bounds)
            )
    return result
