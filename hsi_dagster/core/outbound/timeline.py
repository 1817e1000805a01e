"""The risk timeline of one day: a PNG of risk scores per camera over the level bands, and a markdown summary.

Pure: rows in, bytes and text out (no files, no database). matplotlib draws with its Agg backend on a Figure of
its own (no pyplot state), so it needs no display and is safe in any process.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from hsi_dagster.core.prompt.risk_schema import LEVEL_BANDS

# Opaque fills, so the picture (and a test reading its pixels) shows exactly these colours.
BAND_COLOURS: dict[str, str] = {"low": "#dcefdc", "medium": "#fbf1c7", "high": "#fcdcbf", "critical": "#f6c9c9"}
# One colour per camera, in camera order; none is close to a band colour.
CAMERA_COLOURS: tuple[str, ...] = ("#1f4e9c", "#7b2d8e", "#0f7f6f", "#8a4b12", "#c2185b", "#37474f", "#5c6bc0")
NOT_ASSESSED_COLOUR = "#000000"
FIGURE_INCHES = (11.0, 4.4)
DPI = 100
SIZE_PX = (int(FIGURE_INCHES[0] * DPI), int(FIGURE_INCHES[1] * DPI))
AXES_RECT = (0.055, 0.13, 0.71, 0.77)  # left, bottom, width, height as fractions of the figure
Y_RANGE = (-6.0, 104.0)
NOT_ASSESSED_Y = -3.0  # failed or waiting batches sit under the 0 line, in the low band's margin
SUMMARY_CHARS = 120


@dataclass(frozen=True)
class RiskPoint:
    """One batch of the day: when it started, its camera, and its verdict (score None = no usable verdict)."""

    batch_id: str
    camera_id: str
    started_at: datetime
    status: str
    risk_score: int | None = None
    risk_level: str | None = None
    summary: str | None = None


def camera_colours(points: Sequence[RiskPoint]) -> dict[str, str]:
    cameras = sorted({p.camera_id for p in points})
    return {camera: CAMERA_COLOURS[i % len(CAMERA_COLOURS)] for i, camera in enumerate(cameras)}


def band_limits() -> list[tuple[str, float, float]]:
    """(level, y from, y to) of each band as drawn: contiguous, the outer ones stretched to the axis limits."""
    limits = []
    for i, (level, low, high) in enumerate(LEVEL_BANDS):
        bottom = Y_RANGE[0] if i == 0 else float(low)
        top = Y_RANGE[1] if i == len(LEVEL_BANDS) - 1 else float(high + 1)
        limits.append((level, bottom, top))
    return limits


def render_timeline_png(points: Sequence[RiskPoint], day_start: datetime, day_end: datetime) -> bytes:
    """Risk score over the day per camera (markers joined by a line), on the low/medium/high/critical bands."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.dates import DateFormatter, HourLocator, date2num
    from matplotlib.figure import Figure

    figure = Figure(figsize=FIGURE_INCHES, dpi=DPI)
    FigureCanvasAgg(figure)
    axes = figure.add_axes(AXES_RECT)
    tz = day_start.tzinfo
    for level, bottom, top in band_limits():
        axes.axhspan(bottom, top, facecolor=BAND_COLOURS[level], edgecolor="none", zorder=0)
        axes.text(1.005, (max(bottom, 0) + min(top, 100)) / 2, level, transform=axes.get_yaxis_transform(), va="center")
    colours = camera_colours(points)
    for camera, colour in colours.items():
        scored = sorted((p for p in points if p.camera_id == camera and p.risk_score is not None), key=_when)
        if scored:
            xs = date2num([p.started_at for p in scored])
            ys = [float(p.risk_score or 0) for p in scored]
            axes.plot(
                xs,
                ys,
                color=colour,
                linewidth=1.0,
                alpha=0.55,
                zorder=2,
            )
            axes.scatter(
                xs,
                ys,
                s=64,
                color=colour,
                edgecolors="none",
                label=f"{camera} ({len(scored)})",
                zorder=3,
                clip_on=False,
            )
    failed = [p for p in points if p.risk_score is None]
    if failed:
        axes.scatter(
            date2num([p.started_at for p in failed]),
            [NOT_ASSESSED_Y] * len(failed),
            marker="x",
            s=40,
            color=NOT_ASSESSED_COLOUR,
            label=f"not assessed ({len(failed)})",
            zorder=3,
        )
    axes.set_xlim(float(date2num(day_start)), float(date2num(day_end)))
    axes.xaxis_date(tz)
    axes.set_ylim(*Y_RANGE)
    axes.set_yticks([0, 30, 60, 85, 100])
    axes.xaxis.set_major_locator(HourLocator(byhour=range(0, 24, 3), tz=tz))
    axes.xaxis.set_major_formatter(DateFormatter("%H:%M", tz=tz))
    axes.set_ylabel("risk score")
    axes.set_xlabel(f"batch start ({day_start.tzname() or 'UTC'})")
    assessed = sum(1 for p in points if p.risk_score is not None)
    axes.set_title(f"Risk by camera, {day_start:%Y-%m-%d}: {assessed} assessed of {len(points)} batches", loc="left")
    axes.grid(axis="x", color="#ffffff", linewidth=0.8, zorder=1)
    if points:
        axes.legend(loc="upper left", bbox_to_anchor=(1.1, 1.0), frameon=False, title="camera (batches)")
    else:
        axes.text(0.5, 0.5, "no batches on this day", transform=axes.transAxes, ha="center", va="center")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def _when(point: RiskPoint) -> datetime:
    return point.started_at


def _cell(text: str | None) -> str:
    """Camera-derived text in a table cell: one line, bounded, and unable to form markdown or HTML."""
    if not text:
        return ""
    flat = " ".join(text.split())
    if len(flat) > SUMMARY_CHARS:
        flat = flat[: SUMMARY_CHARS - 1] + "…"
    for char in "\\`*_{}[]()<>#+!|~":
        flat = flat.replace(char, "\\" + char)
    return flat


def daily_summary_markdown(points: Sequence[RiskPoint], day_start: datetime) -> str:
    """Per camera: batches, verdicts per level, not assessed, highest and mean score, the riskiest summary."""
    levels = [level for level, _, _ in LEVEL_BANDS]
    header = ["camera", "batches", *levels, "not assessed", "max", "mean", "riskiest batch"]
    lines = [
        f"**{day_start:%Y-%m-%d}** ({day_start.tzname() or 'UTC'}): {len(points)} batches",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" if i == 0 or i == len(header) - 1 else "---:" for i in range(len(header))) + "|",
    ]
    for camera in sorted({p.camera_id for p in points}):
        mine = [p for p in points if p.camera_id == camera]
        scored = [p for p in mine if p.risk_score is not None]
        scores = [p.risk_score for p in scored if p.risk_score is not None]
        riskiest = max(scored, key=lambda p: (p.risk_score, p.started_at), default=None)
        cells = [
            _cell(camera),
            str(len(mine)),
            *(str(sum(1 for p in scored if p.risk_level == level)) for level in levels),
            str(len(mine) - len(scored)),
            str(max(scores)) if scores else "",
            f"{sum(scores) / len(scores):.1f}" if scores else "",
            (f"{riskiest.started_at:%H:%M} {riskiest.risk_score}: {_cell(riskiest.summary)}" if riskiest else ""),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    if not points:
        lines.append("| (none) |" + " |" * (len(header) - 1))
    return "\n".join(lines) + "\n"
