"""The readable risk report `hsi demo` prints: per camera, then overall token, latency and cache figures."""

from __future__ import annotations

from statistics import median

LEVEL_ORDER = ("critical", "high", "medium", "low")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else 0.0


def build_report(conn, batch_ids: list[str], *, top: int = 2) -> str:
    """Text report over `batch_ids` (the batches one run processed); unassessed batches are listed, not hidden."""
    if not batch_ids:
        return "no closed batches to report"
    conn.execute("CREATE OR REPLACE TEMP TABLE report_ids AS SELECT unnest(?::VARCHAR[]) AS batch_id", [batch_ids])
    rows = conn.execute(
        """SELECT i.batch_id, b.camera_id, b.close_reason, b.detection_count, r.status, r.risk_score, r.risk_level,
                  r.summary, r.prompt_tokens, r.cached_tokens, r.context_utilization, r.latency_ms, r.sections_removed
           FROM report_ids i LEFT JOIN detection_batches b USING (batch_id) LEFT JOIN risk_assessments r USING (batch_id)
           ORDER BY b.camera_id, b.started_at"""
    ).fetchall()
    lines = [f"Risk report: {len(batch_ids)} closed batches", ""]
    cameras: dict[str, list[tuple]] = {}
    for row in rows:
        cameras.setdefault(row[1] or "(unrecorded)", []).append(row)
    for camera, items in cameras.items():
        assessed = [r for r in items if r[4] == "ok"]
        counts = {level: sum(1 for r in assessed if r[6] == level) for level in LEVEL_ORDER}
        level_text = ", ".join(f"{counts[level]} {level}" for level in LEVEL_ORDER if counts[level]) or "none assessed"
        fast = sum(1 for r in items if r[2] == "fast_path")
        lines.append(
            f"{camera}: {len(items)} batches ({fast} fast path), {sum(r[3] or 0 for r in items)} detections; {level_text}"
        )
        for r in sorted(assessed, key=lambda r: -r[5])[:top]:
            lines.append(f"  [{r[6]:>8} {r[5]:>3}] {r[7]}")
        for r in items:
            if r[4] != "ok":
                lines.append(f"  [{'pending' if r[4] is None else r[4]}] {r[0]}")
    ok = [r for r in rows if r[4] == "ok"]
    measured = [r for r in rows if r[8]]
    prompt_tokens = sum(r[8] for r in measured)
    cached = sum(r[9] or 0 for r in measured)
    utilization = [r[10] for r in measured if r[10] is not None]
    latency = [r[11] for r in measured if r[11] is not None]
    trimmed = sum(1 for r in measured if r[12])
    lines += [
        "",
        f"assessed: {len(ok)} ok, {sum(1 for r in rows if r[4] == 'invalid_output')} invalid output, "
        f"{sum(1 for r in rows if r[4] is None)} pending",
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
