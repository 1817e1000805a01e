"""`hsi correct BATCH_ID LEVEL [--note ...]` and `hsi corrections`: the household's corrections from the shell.

A correction is stored once (storage/corrections.py); a refused one exits 2 with the reason naming the field
("level: 'severe' is not one of low, medium, high, critical") and is counted like an MQTT refusal.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hsi_dagster.cli.errors import UsageError
from hsi_dagster.settings import HsiSettings

WAYS = ("lower", "higher", "confirmed")


def cmd_correct(args: argparse.Namespace, settings: HsiSettings) -> int:
    from hsi_dagster.core.outbound.corrections import CorrectionRefused, check_request
    from hsi_dagster.storage.corrections import correct, record_refusal
    from hsi_dagster.storage.db import connect

    now = datetime.now(UTC)
    if not Path(settings.HSI_DUCKDB_PATH).exists():  # a mistyped --db must not create an empty database
        raise UsageError(f"no database at {settings.HSI_DUCKDB_PATH}: nothing was assessed there")
    with connect(settings.HSI_DUCKDB_PATH) as conn:
        try:
            request = check_request(args.batch_id, args.level, args.note, source="cli")
        except CorrectionRefused as refused:
            record_refusal(conn, "cli", refused.refusal, now)
            raise UsageError(f"correction refused: {refused}") from None
        try:
            correction, new = correct(conn, request, now)  # counts its own refusals
        except CorrectionRefused as refused:
            raise UsageError(f"correction refused: {refused}") from None
    verdict = correction.verdict
    print(
        f"{'stored' if new else 'already stored'}: {verdict.batch_id} ({verdict.camera_id}) "
        f"{verdict.risk_level or 'no level'} {verdict.risk_score if verdict.risk_score is not None else '-'}"
        f" -> {request.level} ({correction.direction})"
    )
    return 0


def cmd_corrections(args: argparse.Namespace, settings: HsiSettings) -> int:
    from hsi_dagster.storage.corrections import correction_counts, corrections, refusal_counts
    from hsi_dagster.storage.db import DatabaseNotFound, connect

    try:
        with connect(settings.HSI_DUCKDB_PATH, read_only=True) as conn:
            rows, counts, refused = corrections(conn, args.limit), correction_counts(conn), refusal_counts(conn)
    except DatabaseNotFound:
        rows, counts, refused = [], {}, []
    if args.json:
        print(json.dumps({"corrections": rows, "per_camera": counts, "refused": refused}, default=str))
        return 0
    print(format_corrections(rows, counts, refused))
    return 0


def format_corrections(
    rows: list[dict[str, Any]], counts: dict[str, dict[str, int]], refused: list[dict[str, Any]]
) -> str:
    """Newest first, then per camera how many corrected verdicts went which way, then the refusals."""
    if not rows and not refused:
        return "no corrections yet (`hsi correct BATCH_ID LEVEL`, or the Home Assistant buttons)"
    lines = []
    for row in rows:
        earlier = "" if row["current"] else " (the batch was assessed again since)"
        note = f": {row['note']}" if row["note"] else ""
        lines.append(
            f"{row['received_at']:%Y-%m-%d %H:%M:%S} {row['camera_id']} {row['batch_id']}"
            f" {row['verdict_level'] or 'no level'} -> {row['level']} ({row['direction']}, {row['source']})"
            f"{earlier}{note}"
        )
    for camera, ways in sorted(counts.items()):
        text = ", ".join(f"{ways[way]} {way}" for way in WAYS if ways.get(way))
        lines.append(f"{camera}: {sum(ways.values())} verdicts corrected ({text})")
    for row in refused:
        lines.append(f"refused ({row['source']}, {row['field']}): {row['refused']}, last: {row['last_reason']}")
    return "\n".join(lines)


def cmd_exceptions(args: argparse.Namespace, settings: HsiSettings) -> int:
    from hsi_dagster.core.verdict.evidence import EvidenceRules
    from hsi_dagster.core.verdict.exceptions import ExceptionPolicy
    from hsi_dagster.storage.db import DatabaseNotFound, connect
    from hsi_dagster.storage.exceptions import household_exceptions, remove_exception

    now = datetime.now(UTC)
    rules, policy = EvidenceRules.from_settings(settings), ExceptionPolicy.from_settings(settings)
    if args.remove:
        if not Path(settings.HSI_DUCKDB_PATH).exists():
            raise UsageError(f"no database at {settings.HSI_DUCKDB_PATH}: no exceptions there")
        with connect(settings.HSI_DUCKDB_PATH) as conn:
            exceptions, _, _ = household_exceptions(conn, rules, policy, now)
            if args.remove not in {e.pattern.key for e in exceptions}:
                raise UsageError(f"no exception in force with the key {args.remove!r} (see `hsi exceptions`)")
            remove_exception(conn, args.remove, now)
        print(f"removed: {args.remove} (only corrections received from now on count for it)")
        return 0
    try:
        with connect(settings.HSI_DUCKDB_PATH, read_only=True) as conn:
            exceptions, refused, skipped = household_exceptions(conn, rules, policy, now)
    except DatabaseNotFound:
        exceptions, refused, skipped = [], [], []
    if args.json:
        rows = [
            {"key": e.pattern.key, "explanation": e.explain(), "corrections": e.corrections, "expires_at": e.expires_at}
            for e in exceptions
        ]
        refusals = [{"key": r.pattern.key, "corrections": r.corrections, "reason": r.reason} for r in refused]
        print(json.dumps({"exceptions": rows, "refused": refusals, "skipped": skipped}, default=str))
        return 0
    if not (exceptions or refused or skipped):
        print(f"no household exceptions (a pattern needs {policy.min_corrections} batches corrected to low)")
    for exception in exceptions:
        print(f"{exception.pattern.key}\n  {exception.explain()}")
    for ineligible in refused:
        print(
            f"not an exception: {ineligible.pattern.describe()} ({ineligible.corrections} corrections):"
            f" {ineligible.reason}"
        )
    for line in skipped:
        print(f"skipped: {line}")
    if exceptions:
        print("the evidence floor lifts only the presence rules of a batch of exactly one of these patterns")
    return 0


def add_corrections_parser(sub: Any, with_db: Any) -> None:
    """`hsi correct` and `hsi corrections` on the one argparse tree of cli/main.py."""
    from hsi_dagster.core.outbound.corrections import NOTE_MAX_CHARS
    from hsi_dagster.core.prompt.risk_schema import RISK_LEVELS

    p = with_db(sub.add_parser("correct", help="correct a stored verdict (the household's label)"))
    p.add_argument("batch_id", metavar="BATCH_ID")
    p.add_argument("level", metavar="LEVEL", help=f"one of {', '.join(RISK_LEVELS)}")
    p.add_argument("--note", help=f"why (at most {NOTE_MAX_CHARS} characters)")
    p.set_defaults(corrections_func=cmd_correct)
    p = with_db(sub.add_parser("corrections", help="corrections, newest first; per camera which way"))
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(corrections_func=cmd_corrections)
    p = with_db(sub.add_parser("exceptions", help="household exceptions derived from the corrections"))
    p.add_argument("--remove", metavar="KEY", help="remove the exception with this key")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(corrections_func=cmd_exceptions)
