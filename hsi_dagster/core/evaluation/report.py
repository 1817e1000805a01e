"""The evaluation report as markdown (pure): figures per configuration, agreement, adversarial outcomes, misses.

Charts are passed in as ready image references (a data URI or a relative path), so this module stays pure; the
asset embeds base64 PNGs in its metadata, `hsi eval` links the PNG files it writes next to the report.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from hsi_dagster.core.evaluation.metrics import (
    ALERT_LEVELS,
    INVALID,
    LEVELS,
    ConfigurationFigures,
    ScenarioResult,
    summarise,
)

MAX_SUMMARY_CHARS = 110
MAX_MISSES_SHOWN = 20

DEFINITIONS = """\
- **schema-valid**: the final output (after production's single repair call) parsed into a risk assessment.
- **level accuracy**: level = expected level, over all scenarios (an invalid output is wrong).
- **macro-F1**: mean F1 over the levels present in the labels or the outputs.
- **MAE to band**: mean distance of the score to the acceptable band (0 inside), valid outputs only.
- **under-call**: share of high/critical scenarios not called high or critical (invalid counts: no alert is sent).
- **adversarial**: scenarios whose caption tries to dictate the verdict; handled = level follows the evidence.
- **p50 / p95**: nearest-rank percentiles of the wall time per scenario (all LLM calls of it, repair included).
- **tok/s**: generated tokens / generation seconds as the server reports them (`timings.predicted_ms`).
- **recall (high+crit.)**: 1 - under-call. **false alarms**: expected low, called high or critical.
- **split**: `tune` scenarios are the ones the evidence floor's rules and thresholds were tuned on; `holdout` ones
  were not looked at while tuning: the holdout figures are the honest ones.
- **kappa**: Cohen's kappa between two configurations' levels, over the scenarios both assessed validly.
"""


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _num(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 1000:.1f} s"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _short(text: str | None, limit: int = MAX_SUMMARY_CHARS) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def figures_table(figures: Sequence[ConfigurationFigures], details: Mapping[str, Mapping[str, Any]]) -> str:
    head = (
        "| configuration | model | quality | scenarios | schema-valid | level acc. | macro-F1 | MAE to band "
        "| under-call (high/crit.) | adversarial handled | p50 | p95 | tok/s | prompt tok. | cached tok. "
        "| completion tok. | LLM calls |\n"
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    rows = []
    for f in figures:
        info = details.get(f.configuration, {})
        rows.append(
            f"| {_cell(f.configuration)} | {_cell(info.get('model') or '?')} "
            f"| {_cell(info.get('quality_level') or '?')} "
            f"| {f.scenarios} | {_pct(f.schema_valid_rate)} | {_pct(f.level_accuracy)} | {_num(f.macro_f1)} "
            f"| {_num(f.score_mae_to_band, 1)} | {_pct(f.under_call_rate)} of {f.alert_scenarios} "
            f"| {f.adversarial_correct} of {f.adversarial_scenarios} "
            f"| {_ms(f.latency_p50_ms)} | {_ms(f.latency_p95_ms)} "
            f"| {_num(f.tokens_per_second, 1)} | {f.prompt_tokens:,} | {f.cached_tokens:,} | {f.completion_tokens:,} "
            f"| {f.llm_calls} |"
        )
    return head + "\n".join(rows) + "\n"


def split_table(results: Sequence[ScenarioResult], configurations: Sequence[str]) -> str:
    """The goal figures per split and configuration, computed from the stored results."""
    splits = sorted({r.split for r in results if r.split}, key=lambda s: (s != "holdout", s))
    if not splits:
        return "No split recorded on these results.\n"
    lines = [
        "| split | configuration | scenarios | level acc. | recall (high+crit.) | false alarms (low -> high+) "
        "| adversarial handled | schema-valid | p50 | p95 |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for split in splits:
        for name in configurations:
            rows = [r for r in results if r.configuration == name and r.split == split]
            if not rows:
                continue
            f = summarise(name, rows)
            recall = None if f.under_call_rate is None else 1 - f.under_call_rate
            lines.append(
                f"| {split} | {_cell(name)} | {f.scenarios} | {_pct(f.level_accuracy)} "
                f"| {_pct(recall)} of {f.alert_scenarios} | {_pct(f.false_alarm_rate)} of {f.low_scenarios} "
                f"| {f.adversarial_correct} of {f.adversarial_scenarios} | {_pct(f.schema_valid_rate)} "
                f"| {_ms(f.latency_p50_ms)} | {_ms(f.latency_p95_ms)} |"
            )
    return "\n".join(lines) + "\n"


def confusion_table(figures: ConfigurationFigures) -> str:
    columns = (*LEVELS, INVALID)
    lines = [
        "| expected \\ got | " + " | ".join(columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for level in LEVELS:
        row = figures.confusion.get(level, {})
        lines.append(f"| {level} | " + " | ".join(str(row.get(c, 0)) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def adversarial_table(results: Sequence[ScenarioResult]) -> str:
    rows = [r for r in results if r.adversarial]
    if not rows:
        return "No adversarial scenario was in this run.\n"
    lines = [
        "| configuration | scenario | category | expected | got | score | flagged injection | handled | summary |",
        "|---|---|---|---|---|---:|---|---|---|",
    ]
    for r in rows:
        got = r.predicted or f"{INVALID} ({r.status})"
        lines.append(
            f"| {_cell(r.configuration)} | {r.scenario_id} | {r.category} | {r.expected_level} | {got} "
            f"| {'' if r.risk_score is None else r.risk_score} | {'yes' if r.injection_flagged else 'no'} "
            f"| {'yes' if r.predicted == r.expected_level else '**no**'} | {_cell(_short(r.summary or r.error))} |"
        )
    return "\n".join(lines) + "\n"


def misses_table(results: Sequence[ScenarioResult]) -> str:
    """The costly errors first: high/critical scenarios that did not get an alert level."""
    misses = [r for r in results if r.expected_level in ALERT_LEVELS and r.predicted not in ALERT_LEVELS]
    if not misses:
        return "Every high/critical scenario was called high or critical.\n"
    lines = [
        "| configuration | scenario | category | expected | got | score | summary |",
        "|---|---|---|---|---|---:|---|",
    ]
    for r in misses[:MAX_MISSES_SHOWN]:
        lines.append(
            f"| {_cell(r.configuration)} | {r.scenario_id} | {r.category} | {r.expected_level} "
            f"| {r.predicted or INVALID} | {'' if r.risk_score is None else r.risk_score} "
            f"| {_cell(_short(r.summary or r.error))} |"
        )
    if len(misses) > MAX_MISSES_SHOWN:
        lines.append(f"\n({len(misses) - MAX_MISSES_SHOWN} more under-calls not shown)")
    return "\n".join(lines) + "\n"


def render_report(
    figures: Sequence[ConfigurationFigures],
    results: Sequence[ScenarioResult],
    agreement: Sequence[tuple[str, str, float | None, int]],
    details: Mapping[str, Mapping[str, Any]],
    *,
    scenario_source: str,
    images: Mapping[str, str] | None = None,
) -> str:
    """The whole report. `images`: "comparison" and "confusion:<configuration>" -> an image reference."""
    images = images or {}
    levels = Counter(r.expected_level for r in results if figures and r.configuration == figures[0].configuration)
    parts = [
        "# Evaluation report\n",
        f"Scenario set: {scenario_source}; "
        + ", ".join(f"{levels.get(level, 0)} {level}" for level in LEVELS)
        + " in the first configuration's run.\n",
        "## Figures per configuration\n",
        figures_table(figures, details),
        "## Per split (tune / holdout)\n",
        split_table(results, [f.configuration for f in figures]),
    ]
    if "comparison" in images:
        parts.append(f"![comparison]({images['comparison']})\n")
    parts.append("## Agreement between configurations (Cohen's kappa)\n")
    if agreement:
        parts.append(
            "| configuration A | configuration B | kappa | scenarios |\n|---|---|---:|---:|\n"
            + "\n".join(f"| {_cell(a)} | {_cell(b)} | {_num(k)} | {n} |" for a, b, k, n in agreement)
            + "\n"
        )
    else:
        parts.append("Only one configuration: no agreement to show.\n")
    parts += ["## Adversarial text (a caption that tries to dictate the verdict)\n", adversarial_table(results)]
    parts += ["## Under-calls (expected high or critical, not called so)\n", misses_table(results)]
    parts.append("## Confusion matrices\n")
    for f in figures:
        parts.append(f"### {f.configuration}\n")
        parts.append(confusion_table(f))
        key = f"confusion:{f.configuration}"
        if key in images:
            parts.append(f"![confusion {f.configuration}]({images[key]})\n")
    parts += ["## Definitions\n", DEFINITIONS]
    return "\n".join(parts)
