"""The readable risk report `hsi demo` prints: per camera, then overall token, latency and cache figures.

Each listed verdict says who decided it: the model's score, or the evidence floor (core/verdict/final.py) with the first
rule that fired; a `floor_only` batch (no usable model output, the evidence alone a verdict) counts as assessed. A
verdict the model wanted higher than its trust allowed says so ("model said critical; not trusted for this model:
measured trust 0", core/verdict/trust.py), and verdicts under an unmeasured trust are counted.
"""

from __future__ import annotations

from statistics import median

import duckdb

from hsi_dagster.core.verdict.trust import DEFAULT, untrusted_note
from hsi_dagster.storage.reports import ReportRow, report_rows

LEVEL_ORDER = ("critical", "high", "medium", "low")
VERDICT_STATUSES = ("ok", "floor_only")
REASON_CHARS = 110
CORRECTION_WAYS = ("lower", "higher", "confirmed")  # core/outbound/corrections.py direction


def who_decided(row: ReportRow) -> str:
    """'model 72 (floor 45)' or 'floor 90 > model 8: weapon: ...'; '' for rows stored before the floor existed."""
    if row.decided_by is None:
        return ""
    model = "no model output" if row.model_score is None else f"model {row.model_score}"
    if row.decided_by == "model":
        return f"{model} (floor {row.floor_score or 0})"
    if row.model_score is not None and row.risk_score is not None and row.model_score > row.risk_score:
        # the model said more than its trust allows above the floor's level (core/verdict/final.py)
        trust = row.trust_reason or f"trust {row.model_trust or 0}"
        return f"trust cap {row.risk_score} < {model} (floor {row.floor_score or 0}, {trust})"
    reason = (row.floor_reasons or ["evidence rules"])[0]
    reason = reason if len(reason) <= REASON_CHARS else reason[: REASON_CHARS - 1] + "…"
    return f"floor {row.floor_score} > {model}: {reason}"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else 0.0


def build_report(conn: duckdb.DuckDBPyConnection, batch_ids: list[str], *, top: int = 2) -> str:
    """Text report over `batch_ids` (the batches one run processed); unassessed batches are listed, not hidden."""
    if not batch_ids:
        return "no closed batches to report"
    return format_report(report_rows(conn, batch_ids), len(batch_ids), top=top)


def format_report(rows: list[ReportRow], batch_count: int, *, top: int = 2) -> str:
    lines = [f"Risk report: {batch_count} closed batches", ""]
    cameras: dict[str, list[ReportRow]] = {}
    for row in rows:
        cameras.setdefault(row.camera_id or "(unrecorded)", []).append(row)
    for camera, items in cameras.items():
        assessed = [r for r in items if r.status in VERDICT_STATUSES]
        counts = {level: sum(1 for r in assessed if r.risk_level == level) for level in LEVEL_ORDER}
        level_text = ", ".join(f"{counts[level]} {level}" for level in LEVEL_ORDER if counts[level]) or "none assessed"
        fast = sum(1 for r in items if r.close_reason == "fast_path")
        detections = sum(r.detection_count or 0 for r in items)
        lines.append(f"{camera}: {len(items)} batches ({fast} fast path), {detections} detections; {level_text}")
        corrected = [r.corrected for r in items if r.corrected]
        if corrected:
            ways = ", ".join(f"{corrected.count(way)} {way}" for way in CORRECTION_WAYS if way in corrected)
            lines.append(f"  corrected by the household: {len(corrected)} verdicts ({ways})")
        for r in sorted(assessed, key=lambda r: -(r.risk_score or 0))[:top]:
            lines.append(f"  [{r.risk_level:>8} {r.risk_score:>3}] {r.summary}")
            if who_decided(r):
                lines.append(f"  {'':>14}decided by {who_decided(r)}")
            note = untrusted_note(r.model_level, r.risk_level, r.trust_reason)
            if note:
                lines.append(f"  {'':>14}{note}")
        for r in items:
            if r.status not in VERDICT_STATUSES:
                lines.append(f"  [{'pending' if r.status is None else r.status}] {r.batch_id}")
    ok = [r for r in rows if r.status == "ok"]
    with_floor = [r for r in rows if r.status in VERDICT_STATUSES and r.decided_by is not None]
    by_floor = [r for r in with_floor if r.decided_by == "floor"]
    floor_only = sum(1 for r in rows if r.status == "floor_only")
    untrusted = [r for r in rows if untrusted_note(r.model_level, r.risk_level, r.trust_reason)]
    unmeasured = sorted({r.trust_reason for r in rows if r.trust_source == DEFAULT and r.trust_reason})
    measured = [r for r in rows if r.prompt_tokens]
    prompt_tokens = sum(r.prompt_tokens or 0 for r in measured)
    cached = sum(r.cached_tokens or 0 for r in measured)
    utilization = [r.context_utilization for r in measured if r.context_utilization is not None]
    latency = [r.latency_ms for r in measured if r.latency_ms is not None]
    trimmed = sum(1 for r in measured if r.sections_removed)
    lines += [
        "",
        f"assessed: {len(ok)} ok, "
        + (f"{floor_only} decided by the evidence alone (no usable model output), " if floor_only else "")
        + f"{sum(1 for r in rows if r.status == 'invalid_output')} invalid output, "
        f"{sum(1 for r in rows if r.status is None)} pending",
        *(
            [f"evidence floor: decided {len(by_floor)} of {len(with_floor)} verdicts (raised above the model's score)"]
            if with_floor
            else []
        ),
        *(
            [f"model said more than its trust allowed: {len(untrusted)} verdicts (listed above when in the top)"]
            if untrusted
            else []
        ),
        *[f"WARNING unmeasured model trust: {reason} (run `hsi eval`)" for reason in unmeasured],
        f"context utilization: median {median(utilization):.2f}, max {max(utilization):.2f}; "
        f"{trimmed} prompts had sections removed"
        if utilization
        else "context utilization: n/a",
        f"latency per assessment: median {median(latency) / 1000:.1f}s, p95 {_percentile(latency, 0.95) / 1000:.1f}s"
        if latency
        else "latency: n/a",
        f"cached prompt tokens: {cached} of {prompt_tokens} ({cached / prompt_tokens:.0%})"
        if prompt_tokens
        else "cached prompt tokens: n/a",
    ]
    return "\n".join(lines)
