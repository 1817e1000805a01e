"""The report of an `hsi llm sweep` (cli/llm_sweep.py runs it): each candidate's figures from the evaluation's
results and the recorded completions, the ratios to the baseline, the one-line recommendation, and the markdown
table and PNG chart."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hsi_dagster.llm.protocol import ChatResult

FASTER = 1.05  # a candidate must be this much faster than the baseline to be recommended
LIGHTER = 0.90  # ... or need this little memory at no loss of speed

Call = tuple[float, float, "ChatResult"]  # (monotonic start, end, result) of one completion


# ----------------------------------------------------------------------------------------------- figures
@dataclass
class CandidateRun:
    name: str
    overrides: dict[str, str]
    status: str  # ok | failed
    reason: str | None = None
    server: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    ratios: dict[str, float | None] = field(default_factory=dict)


# figure key, table heading, format, "higher is better" (None: neither)
COLUMNS: tuple[tuple[str, str, str, bool | None], ...] = (
    ("verdicts_per_minute", "verdicts/min", "{:.2f}", True),
    ("latency_p50_s", "p50 s", "{:.1f}", False),
    ("latency_p95_s", "p95 s", "{:.1f}", False),
    ("prompt_tokens_per_s", "prompt tok/s", "{:.0f}", True),
    ("generation_tokens_per_s", "gen tok/s", "{:.1f}", True),
    ("cached_share", "cached", "{:.0%}", True),
    ("peak_rss_mib", "peak RSS MiB", "{:.0f}", False),
    ("schema_valid_rate", "schema-valid", "{:.0%}", True),
    ("level_accuracy", "level acc.", "{:.0%}", True),
    ("under_call_rate", "under-calls", "{:.0%}", False),
    ("false_alarm_rate", "false alarms", "{:.0%}", False),
)
RATIO_KEYS = ("verdicts_per_minute", "latency_p50_s", "latency_p95_s", "prompt_tokens_per_s",
              "generation_tokens_per_s", "peak_rss_mib")  # fmt: skip


def _sum_timing(calls: list[ChatResult], key: str) -> float:
    return sum(float((call.timings or {}).get(key) or 0) for call in calls)


def figures_of(results_model: list, results_floored: list, calls: list[Call], peak: int | None) -> dict[str, Any]:
    """The sweep's figures for one candidate from the evaluation's results and the recorded completions."""
    from hsi_dagster.core.evaluation.metrics import summarise

    model = summarise("model", results_model)
    floored = summarise("with-floor", results_floored)
    replies = [call for _, _, call in calls]
    window = (max(end for _, end, _ in calls) - min(start for start, _, _ in calls)) if calls else 0.0
    verdicts = sum(1 for r in results_model if r.llm_calls)
    prompt_ms, predicted_ms = _sum_timing(replies, "prompt_ms"), _sum_timing(replies, "predicted_ms")
    prompt_tokens = sum(call.usage.prompt_tokens for call in replies)
    statuses: dict[str, int] = {}
    for result in results_model:
        statuses[result.status] = statuses.get(result.status, 0) + 1
    return {
        "scenarios": len(results_model),
        "statuses": statuses,
        "verdicts": verdicts,
        "completions": len(replies),
        "seconds": round(window, 2),
        "verdicts_per_minute": verdicts / window * 60 if window > 0 else None,
        "latency_p50_s": model.latency_p50_ms / 1000 if model.latency_p50_ms is not None else None,
        "latency_p95_s": model.latency_p95_ms / 1000 if model.latency_p95_ms is not None else None,
        "prompt_tokens_per_s": _sum_timing(replies, "prompt_n") / prompt_ms * 1000 if prompt_ms else None,
        "generation_tokens_per_s": _sum_timing(replies, "predicted_n") / predicted_ms * 1000 if predicted_ms else None,
        "prompt_tokens": prompt_tokens,
        "cached_tokens": sum(call.usage.cached_tokens for call in replies),
        "completion_tokens": sum(call.usage.completion_tokens for call in replies),
        "cached_share": sum(call.usage.cached_tokens for call in replies) / prompt_tokens if prompt_tokens else None,
        "peak_rss_mib": peak / 2**20 if peak else None,
        "schema_valid_rate": model.schema_valid_rate,
        "level_accuracy": floored.level_accuracy,
        "under_call_rate": floored.under_call_rate,
        "false_alarm_rate": floored.false_alarm_rate,
    }


def _ratio(value: Any, base: Any) -> float | None:
    if isinstance(value, int | float) and isinstance(base, int | float) and base:
        return value / base
    return None


def with_ratios(runs: list[CandidateRun]) -> None:
    base = runs[0] if runs and runs[0].status == "ok" else None
    for run in runs:
        if base is not None and run.status == "ok":
            run.ratios = {key: _ratio(run.figures.get(key), base.figures.get(key)) for key in RATIO_KEYS}


def recommend(runs: list[CandidateRun]) -> str:
    """One line: the candidate to switch to, and why, or why the baseline stays."""
    if not runs or runs[0].status != "ok":
        reason = runs[0].reason if runs else "no candidates"
        return f"No recommendation: the baseline did not run ({reason})."
    base = runs[0]
    n = base.figures.get("scenarios")

    def quality_kept(run: CandidateRun) -> bool:
        def at_least(key: str) -> bool:
            value, reference = run.figures.get(key), base.figures.get(key)
            return reference is None or (value is not None and value >= reference)

        return at_least("schema_valid_rate") and at_least("level_accuracy")

    usable = [r for r in runs[1:] if r.status == "ok" and quality_kept(r)]
    faster = [r for r in usable if (r.ratios.get("verdicts_per_minute") or 0) >= FASTER]
    if faster:
        best = max(faster, key=lambda r: r.ratios.get("verdicts_per_minute") or 0)
        return (
            f"Switch to {best.name}: verdicts/min x{best.ratios['verdicts_per_minute']:.2f}, p95 latency "
            f"x{_x(best.ratios.get('latency_p95_s'))}, peak memory {_pct_change(best.ratios.get('peak_rss_mib'))}, "
            f"quality unchanged or better on {n} scenarios."
        )
    lighter = [
        r
        for r in usable
        if (r.ratios.get("peak_rss_mib") or 1) <= LIGHTER and (r.ratios.get("verdicts_per_minute") or 0) >= 1 / FASTER
    ]
    if lighter:
        best = min(lighter, key=lambda r: r.ratios.get("peak_rss_mib") or 1)
        return (
            f"Switch to {best.name} to save memory: peak memory {_pct_change(best.ratios.get('peak_rss_mib'))}, "
            f"verdicts/min x{best.ratios['verdicts_per_minute']:.2f}, quality unchanged or better on {n} scenarios."
        )
    failed = [r.name for r in runs[1:] if r.status != "ok"]
    note = f" ({len(failed)} candidate(s) failed: {', '.join(failed)})" if failed else ""
    return (
        f"Keep the baseline: no candidate was {FASTER - 1:.0%} faster (or {1 - LIGHTER:.0%} lighter at the same speed) "
        f"with the same schema-valid rate and level accuracy on {n} scenarios{note}."
    )


def statuses_line(statuses: dict[str, int]) -> str:
    return ", ".join(f"{count} {status}" for status, count in statuses.items()) or "no scenarios"


def _x(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{ratio:.2f}"


def _pct_change(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{ratio - 1:+.0%}"


# ----------------------------------------------------------------------------------------------- output
def cell(value: Any, pattern: str) -> str:
    return "n/a" if value is None else pattern.format(value)


def markdown(runs: list[CandidateRun], recommendation: str, title: str) -> str:
    lines = [f"# llama-server sweep: {title}", "", recommendation, ""]
    heads = ["candidate", "status", *(head for _, head, _, _ in COLUMNS)]
    lines += ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for run in runs:
        if run.status != "ok":
            cells = [run.name, "failed", *["" for _ in COLUMNS]]
        else:
            cells = [run.name, "ok"]
            for key, _, pattern, _ in COLUMNS:
                text = cell(run.figures.get(key), pattern)
                ratio = run.ratios.get(key)
                if ratio is not None and run is not runs[0]:
                    text += f" (x{ratio:.2f})"
                cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Servers", ""]
    for run in runs:
        server = run.server
        if run.status != "ok":
            lines.append(f"- **{run.name}**: failed: {run.reason}")
            continue
        sha = server.get("model_sha256")
        lines.append(
            f"- **{run.name}**: build {server.get('build_info')}, model {server.get('model_alias')} "
            f"({server.get('model_type')}, sha256 {sha[:16] + '...' if sha else 'n/a'}), {server.get('total_slots')} "
            f"slot(s) x {server.get('slot_context')} tokens, speculative {server.get('speculative')}; "
            f"{run.figures.get('verdicts')} verdicts ({statuses_line(run.figures.get('statuses') or {})}) from "
            f"{run.figures.get('completions')} completions in {run.figures.get('seconds')} s"
        )
        if server.get("argv"):
            lines.append(f"  - flags: `{' '.join(server['argv'][1:])}`")
    lines += [
        "",
        "Ratios are to the baseline (first row). Tokens/s are per request, from llama-server's timings; verdicts/min "
        "is the aggregate over the candidate's run at the pipeline's concurrency (its slots); quality figures are "
        "those of the stored verdict (model raised to the evidence floor).",
    ]
    return "\n".join(lines) + "\n"


def chart_png(runs: list[CandidateRun]) -> bytes | None:
    """Verdicts/min, p95 latency and peak memory of each candidate as ratios to the baseline."""
    ok = [run for run in runs if run.status == "ok" and run.ratios]
    if len(ok) < 2:
        return None
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = (("verdicts_per_minute", "verdicts/min"), ("latency_p95_s", "p95 latency"), ("peak_rss_mib", "peak RSS"))
    figure, axes = plt.subplots(figsize=(7.5, 3.6))
    width = 0.8 / len(keys)
    for index, (key, label) in enumerate(keys):
        values = [run.ratios.get(key) or 0.0 for run in ok]
        axes.bar([i + index * width for i in range(len(ok))], values, width, label=label)
    axes.axhline(1.0, color="grey", linewidth=0.8)
    axes.set_xticks([i + width for i in range(len(ok))], labels=[run.name for run in ok], rotation=15)
    axes.set_ylabel("ratio to the baseline")
    axes.legend(fontsize=8)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(figure)
    return buffer.getvalue()
