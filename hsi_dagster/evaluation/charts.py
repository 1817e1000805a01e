"""Evaluation charts as PNG bytes (matplotlib, Agg backend: no display needed): a confusion matrix per
configuration and a comparison bar chart. Shared by the `evaluation` asset (base64 in its metadata) and `hsi eval`
(files next to the report)."""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend is chosen before pyplot is imported)

from hsi_dagster.core.evaluation.metrics import INVALID, LEVELS, ConfigurationFigures  # noqa: E402

COMPARED = (
    ("schema_valid_rate", "schema-valid"),
    ("level_accuracy", "level accuracy"),
    ("macro_f1", "macro-F1"),
    ("under_call_rate", "under-call\n(lower is better)"),
)


def _png(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(figure)
    return buffer.getvalue()


def confusion_png(figures: ConfigurationFigures) -> bytes:
    columns = (*LEVELS, INVALID)
    matrix = [[figures.confusion.get(level, {}).get(column, 0) for column in columns] for level in LEVELS]
    figure, axes = plt.subplots(figsize=(5.2, 3.8))
    axes.imshow(matrix, cmap="Blues")
    axes.set_xticks(range(len(columns)), labels=list(columns))
    axes.set_yticks(range(len(LEVELS)), labels=list(LEVELS))
    axes.set_xlabel("model's level")
    axes.set_ylabel("expected level")
    top = max((max(row) for row in matrix), default=0)
    for i, row in enumerate(matrix):
        for j, count in enumerate(row):
            axes.text(j, i, str(count), ha="center", va="center", color="white" if count > top / 2 else "black")
    axes.set_title(f"{figures.configuration}: {figures.scenarios} scenarios")
    return _png(figure)


def comparison_png(figures: Sequence[ConfigurationFigures]) -> bytes:
    figure, axes = plt.subplots(figsize=(max(7.0, 0.9 * len(COMPARED) * max(1, len(figures))), 4.0))
    width = 0.8 / max(1, len(figures))
    for index, item in enumerate(figures):
        values = [getattr(item, name) for name, _ in COMPARED]
        positions = [k + index * width for k in range(len(COMPARED))]
        bars = axes.bar(positions, [v or 0 for v in values], width, label=item.configuration)
        for bar, value in zip(bars, values, strict=True):
            axes.text(
                bar.get_x() + bar.get_width() / 2,
                bar.get_height() + 0.01,
                "n/a" if value is None else f"{value:.2f}",
                ha="center",
                va="bottom",
                fontsize=7,
            )
    axes.set_xticks([k + width * (len(figures) - 1) / 2 for k in range(len(COMPARED))], labels=[t for _, t in COMPARED])
    axes.set_ylim(0, 1.12)
    axes.set_ylabel("share")
    axes.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=min(3, max(1, len(figures))))
    axes.set_title("Configurations compared on the labeled scenarios")
    return _png(figure)


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")
