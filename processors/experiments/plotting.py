"""CSV and PNG output shared by the experiment reproductions.

CSVs start with ``#`` note lines (setup, scale, what differs from the paper) so that a file read
on its own says how it was made; ``read_csv`` skips them. PNGs are small (dpi 80) because they
are committed next to the docs.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

DPI = 80
STYLE: dict[str, dict[str, Any]] = {
    "Optimal": {"color": "black", "linestyle": "--", "marker": "s"},
    "A-Greedy": {"color": "tab:blue", "marker": "o"},
    "Sweep": {"color": "tab:orange", "marker": "^"},
    "Independent": {"color": "tab:green", "marker": "v"},
    "LocalSwaps": {"color": "tab:red", "marker": "d"},
}


def write_csv(
    path: Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str], notes: Iterable[str]
) -> Path:
    """Rows (missing keys left empty) under ``# `` note lines; floats keep 6 significant digits
    so that a re-run only changes the timing columns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        for note in notes:
            fh.write(f"# {note}\n")
        writer = csv.writer(fh)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([_fmt(row.get(c, "")) for c in columns])
    return path


def write_json(path: Path, summary: Mapping[str, Any]) -> Path:
    """An experiment's summary figures (``--json``), its folder made if need be."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2))
    return path


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def read_csv(path: Path) -> list[dict[str, str]]:
    """The rows of a CSV written by :func:`write_csv` (note lines skipped)."""
    with path.open(newline="") as fh:
        lines = [line for line in fh if not line.startswith("#")]
    return list(csv.DictReader(lines))


def figure(
    title: str, xlabel: str, ylabel: str, size: tuple[float, float] = (6.0, 4.0)
) -> tuple[Figure, Any]:
    fig, ax = plt.subplots(figsize=size, dpi=DPI)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    return fig, ax


def save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def line_plot(
    path: Path,
    title: str,
    xlabel: str,
    ylabel: str,
    x: Sequence[float],
    series: Mapping[str, Sequence[float | None]],
    logx: bool = False,
    logy: bool = False,
    xticks: Sequence[float] | None = None,
    markers: bool = True,
) -> Path:
    """One line per label (``None`` values are gaps), styled per algorithm; long series
    (timelines) go without markers."""
    fig, ax = figure(title, xlabel, ylabel)
    for label, ys in series.items():
        points = [(a, b) for a, b in zip(x, ys, strict=True) if b is not None]
        if not points:
            continue
        xs, vs = zip(*points, strict=True)
        style = dict(STYLE.get(label, {}))
        if not markers:
            style.pop("marker", None)
        ax.plot(xs, vs, label=label, markersize=4, linewidth=1.0 if markers else 0.6, **style)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    if xticks is not None:
        ax.set_xticks(list(xticks))
        ax.set_xticklabels([_tick(t) for t in xticks])
        ax.minorticks_off()
    ax.legend(fontsize=8)
    return save(fig, path)


def _tick(value: float) -> str:
    """20000 -> 20k, 1000000 -> 1M: tuple counts readable on a log axis."""
    for div, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= div:
            return f"{value / div:g}{suffix}"
    return f"{value:g}"


def stacked_bars(
    path: Path,
    title: str,
    ylabel: str,
    groups: Sequence[str],
    bars: Sequence[str],
    parts: Sequence[str],
    values: Mapping[tuple[str, str, str], float],
    group_label: str = "",
) -> Path:
    """For each group, one bar per ``bars`` entry stacked from ``parts``
    (``values[(group, bar, part)]``); bars are labelled by their initials under the axis."""
    fig, ax = figure(title, group_label, ylabel, size=(7.0, 4.0))
    width = 0.8 / max(len(bars), 1)
    colors = plt.get_cmap("tab10").colors
    for b, bar in enumerate(bars):
        bottom = [0.0] * len(groups)
        for p, part in enumerate(parts):
            heights = [values.get((g, bar, part), 0.0) for g in groups]
            xs = [i + (b - (len(bars) - 1) / 2) * width for i in range(len(groups))]
            ax.bar(
                xs,
                heights,
                width * 0.95,
                bottom=bottom,
                color=colors[p % len(colors)],
                label=part if b == 0 else None,
                edgecolor="white",
                linewidth=0.3,
            )
            bottom = [u + h for u, h in zip(bottom, heights, strict=True)]
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    if len(bars) > 1:
        ax.text(
            0.0,
            -0.2,
            "bars, left to right: " + ", ".join(bars),
            transform=ax.transAxes,
            fontsize=7,
        )
    ax.legend(fontsize=7)
    return save(fig, path)


def grouped_bars(
    path: Path,
    title: str,
    ylabel: str,
    groups: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    group_label: str = "",
    reference: float | None = None,
) -> Path:
    """For each group, one bar per series (``None``: no bar), with a dashed line at
    ``reference`` if given (e.g. 1.0 on a graph relative to a baseline)."""
    fig, ax = figure(title, group_label, ylabel, size=(7.0, 4.0))
    width = 0.8 / max(len(series), 1)
    for b, (label, values) in enumerate(series.items()):
        xs = [i + (b - (len(series) - 1) / 2) * width for i in range(len(groups))]
        points = [(x, v) for x, v in zip(xs, values, strict=True) if v is not None]
        if points:
            ax.bar([x for x, _ in points], [v for _, v in points], width * 0.95, label=label)
    if reference is not None:
        ax.axhline(reference, color="black", linestyle="--", linewidth=0.8)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    ax.legend(fontsize=7)
    return save(fig, path)
