"""The report's plots, drawn with matplotlib (the optional ``report`` extra) as base64 PNGs, so
the HTML page embeds them and stays one self-contained file. Without matplotlib every function
here is never called: the report has its tables and says how to get the plots."""
from __future__ import annotations

import base64
import io
import math
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from aot_tune.runtime.devices import DevicePeak
    from aot_tune.reports.rows import Heatmap, ShapeRow

SIDES = (("tuned", "#2b7bba"), ("default", "#f0a030"), ("vendor", "#7f7f7f"))
SPLIT_COLORS = {"specialize": "#9467bd", "compile": "#f0a030", "bench": "#2b7bba", "other": "#c7c7c7"}


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # no display; files only
    import matplotlib.pyplot as plt

    return plt


def _png(figure) -> str:
    plt = _pyplot()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def comparison(kernel: str, device: str, unit: str | None, rows: Sequence["ShapeRow"], peak: "DevicePeak | None",
               dtypes: Sequence[str]) -> str | None:
    """Grouped bars per shape: tuned, default and vendor, as rates with the peak as a line when
    the kernel declares its cost, else as times (log scale)."""
    bars = {side: [_height(getattr(row, side), unit) for row in rows] for side, _ in SIDES}
    if all(math.isnan(h) for heights in bars.values() for h in heights):
        return None  # nothing to draw: no rows, or no side with a time (or a rate, where rates are drawn)
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(max(6.0, 0.9 * len(rows) + 2), 3.6))
    width = 0.8 / len(SIDES)
    for i, (side, color) in enumerate(SIDES):
        axes.bar([x + (i - 1) * width for x in range(len(rows))], bars[side], width, label=side, color=color)
    if unit:
        axes.set_ylabel(unit)
        peaks = {(peak.matrix_tflops.get(d) if unit == "TFLOP/s" else peak.memory_gbps) for d in dtypes} \
            if peak else set()
        for value in sorted(p for p in peaks if p):
            axes.axhline(value, color="#d62728", linestyle="--", linewidth=1)
            axes.annotate(f"peak {value:,.0f} {unit}", (1.0, value), xycoords=("axes fraction", "data"),
                          ha="right", va="bottom", fontsize=8, color="#d62728")
    else:
        axes.set_ylabel("time (µs, lower is better)")
        axes.set_yscale("log")
    several = len({row.dtype for row in rows}) > 1
    axes.set_xticks(range(len(rows)))
    rotated = len(rows) > 6
    axes.set_xticklabels([f"{row.shape}\n{row.dtype}" if several else row.shape for row in rows],
                         rotation=30 if rotated else 0, ha="right" if rotated else "center", fontsize=8)
    axes.set_title(f"{kernel} on {device}: tuned vs default vs vendor")
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # outside: never over a bar
    return _png(figure)


def _height(timed, unit: str | None) -> float:
    if unit:
        return timed.rate.value if timed.rate else math.nan
    return timed.ms * 1e3 if timed.ms else math.nan


def heatmap(kernel: str, device: str, data: "Heatmap") -> str | None:
    """One row per parameter, one cell per value, colored by the heatmap score (1.0: fastest)."""
    if not data.params or all(s is None for row in data.scores for s in row):
        return None
    plt = _pyplot()
    columns = max(len(v) for v in data.values)
    grid = [[math.nan] * columns for _ in data.params]
    for i, row in enumerate(data.scores):
        for j, score in enumerate(row):
            grid[i][j] = math.nan if score is None else score
    figure, axes = plt.subplots(figsize=(1.1 * columns + 2.5, 0.55 * len(data.params) + 1.2))
    image = axes.imshow(grid, cmap="RdYlGn", vmin=0.5, vmax=1.0, aspect="auto")
    for i, values in enumerate(data.values):
        for j, value in enumerate(values):
            score = data.scores[i][j]
            text = f"{value}\n{score:.2f}" if score is not None else f"{value}\n—"
            axes.text(j, i, text, ha="center", va="center", fontsize=7)
    axes.set_yticks(range(len(data.params)))
    axes.set_yticklabels(data.params, fontsize=8)
    axes.set_xticks([])
    axes.set_title(f"{kernel} on {device}: fastest / fastest with the value (geomean over shapes)", fontsize=9)
    figure.colorbar(image, ax=axes, fraction=0.03)
    return _png(figure)


def time_split(runs: Sequence[tuple[str, dict[str, float]]]) -> str | None:
    """Stacked horizontal bars of each logged run's wall time: specialize, compile, bench, other."""
    if not any(seconds > 0 for _, split in runs for seconds in split.values()):
        return None  # no run, or only runs of no measurable length
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(8, 0.45 * len(runs) + 1.2))
    for y, (_, split) in enumerate(runs):
        left = 0.0
        for part, seconds in split.items():
            axes.barh(y, seconds, left=left, color=SPLIT_COLORS.get(part, "#bbbbbb"), label=part)
            left += seconds
    axes.set_yticks(range(len(runs)))
    axes.set_yticklabels([label for label, _ in runs], fontsize=7)
    axes.invert_yaxis()
    axes.set_xlabel("seconds of wall time")
    handles, labels = axes.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    axes.legend(unique.values(), unique.keys(), fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _png(figure)
