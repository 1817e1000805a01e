"""The readable risk report `hsi demo` prints: per camera, then overall token, latency and cache figures."""

from __future__ import annotations

from statistics import median

import duckdb

from hsi_dagster.storage.reports import ReportRow, report_rows

LEVEL_ORDER = ("critical", "high", "medium", "low")


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
        assessed = [r for r in items if r.status == "ok"]
        counts = {level: sum(1 for r in assessed if r.risk_level == level) for level in LEVEL_ORDER}
        level_text = ", ".join(f"{counts[level]} {level}" for level in LEVEL_ORDER if counts[level]) or "none assessed"
        fast = sum(1 for r in items if r.close_reason == "fast_path")
        detections = sum(r.detection_count or 0 for r in items)
        lines.append(f"{camera}: {len(items)} batches ({fast} fast path), {detections} detections; {level_text}")
        for r in sorted(assessed, key=lambda r: -(r.risk_score or 0))[:top]:
            lines.append(f"  [{r.risk_level:>8} {r.risk_score:>3}] {r.summary}")
        for r in items:
            if r.status != "ok":
                lines.append(f"  [{'pending' if r.status is None else r.status}] {r.batch_id}")
    ok = [r for r in rows if r.status == "ok"]
    measured = [r for r in rows if r.prompt_tokens]
    prompt_tokens = sum(r.prompt_tokens or 0 for r in measured)
    cached = sum(r.cached_tokens or 0 for r in measured)
    utilization = [r.context_utilization for r in measured if r.context_utilization is not None]
    latency = [r.latency_ms for r in measured if r.latency_ms is not None]
    trimmed = sum(1 for r in measured if r.sections_removed)
    lines += [
        "",
        f"assessed: {len(ok)} ok, {sum(1 for r in rows if r.status == 'invalid_output')} invalid output, "
        f"{sum(1 for r in rows if r.status is None)} pending",
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
