"""What the scheduling experiments write: memory and latency timelines (a whole-run panel and a
zoom around the largest queue), the summary CSV and its notes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from processors.experiments import plotting
from processors.experiments.sched_setup import (
    BIN_US,
    BYTES_PER_UNIT,
    COLORS,
    EXTRA_COLORS,
    FLOW_SCALE_US,
    KB,
    LATENCY_BLOCK,
    RR_QUANTUM_US,
    UTILIZATION,
    ZOOM_US,
    Run,
    latency_blocks,
    memory_bins,
)


def save_png(fig: Any, path: Path) -> Path:
    """plotting.save, then the PNG reduced to a 256-colour palette: the timelines' thousands
    of steps make a full-colour PNG three times larger, for no visible difference."""
    from PIL import Image

    plotting.save(fig, path)
    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE)
    small.save(path, optimize=True)
    return path


def edges_for(end_us: float) -> np.ndarray:
    return np.arange(0.0, end_us + BIN_US, BIN_US)


def latency_bins(x_ms: np.ndarray, y_ms: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The largest y among the points whose x falls in each bin (NaN: none)."""
    out = np.full(len(edges) - 1, -np.inf)
    b = np.searchsorted(edges / 1000, x_ms, side="right") - 1
    inside = (b >= 0) & (b < len(out))
    np.maximum.at(out, b[inside], y_ms[inside])
    out[np.isinf(out)] = np.nan
    return out


def color_of(label: str, i: int) -> str:
    return COLORS.get(label, EXTRA_COLORS[i % len(EXTRA_COLORS)])


def style_of(label: str, i: int) -> dict[str, Any]:
    """FIFO dashed and on top: it often coincides with Greedy."""
    if label == "FIFO":
        return {"color": COLORS["FIFO"], "ls": "--", "zorder": 3}
    return {"color": color_of(label, i)}


def zoom_window(runs: Sequence[Run], end_us: float) -> tuple[float, float]:
    """ZOOM_US around the time of the largest queue of any run."""
    best_t, best_m = 0.0, -1.0
    for run in runs:
        mem = run.result.memory
        if mem:
            i = int(np.argmax(np.asarray(mem, dtype=np.float64)))
            if float(mem[i]) > best_m:
                best_t, best_m = float(run.result.times[i]), float(mem[i])
    lo = max(0.0, min(best_t - ZOOM_US / 2, end_us - ZOOM_US))
    return lo, lo + ZOOM_US


def _two_panels(title: str, runs: Sequence[Run], end_us: float) -> tuple[Any, Any, Any, Any]:
    """A figure with the whole run on top and the zoom window (also returned) below."""
    fig, (top, bottom) = plotting.plt.subplots(2, 1, figsize=(7.0, 6.0), dpi=plotting.DPI)
    top.set_title(title, fontsize=10)
    return fig, top, bottom, zoom_window(runs, end_us)


def _finish_panels(top: Any, bottom: Any, zoom: tuple[float, float], ylabel: str) -> None:
    """Shade the zoom window on the top panel; axis labels, grids and the legend."""
    top.axvspan(zoom[0] / 1000, zoom[1] / 1000, color="0.9", zorder=0)
    for ax, label in (
        (top, f"whole run (peak per {BIN_US / 1000:g} ms)"),
        (bottom, "zoom: the largest burst"),
    ):
        ax.set_xlabel(f"time (ms); {label}")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
    top.legend(fontsize=8)


def memory_outputs(
    out_dir: Path, stem: str, title: str, runs: Sequence[Run], end_us: float, notes: list[str]
) -> tuple[Path, Path]:
    """``<stem>_memory.csv`` (peak KB per 100 ms per policy) and ``<stem>_memory.png`` (whole
    run above, 2 s around the largest queue below, as step lines)."""
    edges = edges_for(end_us)
    cols = {run.label: memory_bins(run.result, edges) * BYTES_PER_UNIT / KB for run in runs}
    rows = [
        {"time_ms": float(edges[i] / 1000), **{k: float(v[i]) for k, v in cols.items()}}
        for i in range(len(edges) - 1)
    ]
    csv = plotting.write_csv(
        out_dir / f"{stem}_memory.csv",
        rows,
        ["time_ms", *cols],
        [*notes, f"total queue size: peak KB per {BIN_US / 1000:g} ms from time_ms on"],
    )
    fig, top, bottom, (lo, hi) = _two_panels(title, runs, end_us)
    for i, run in enumerate(runs):
        style = style_of(run.label, i)
        top.plot(edges[:-1] / 1000, cols[run.label], label=run.label, lw=0.7, **style)
        t = np.asarray(run.result.times, dtype=np.float64)
        m = np.asarray(run.result.memory, dtype=np.float64) * BYTES_PER_UNIT / KB
        sel = (t >= lo) & (t <= hi)
        if sel.any():
            bottom.step(t[sel] / 1000, m[sel], where="post", lw=0.8, **style)
    _finish_panels(top, bottom, (lo, hi), "total queue size (KB)")
    png = save_png(fig, out_dir / f"{stem}_memory.png")
    return csv, png


def latency_outputs(
    out_dir: Path,
    stem: str,
    title: str,
    runs: Sequence[Run],
    end_us: float,
    notes: list[str],
    thresholds_ms: Sequence[float] = (),
) -> tuple[Path, Path]:
    """``<stem>.csv`` (per 100 ms and policy, the largest mean latency of a block of 4 outputs
    leaving then) and ``<stem>.png`` (that, over the whole run; every block in the zoom
    window)."""
    edges = edges_for(end_us)
    series = {run.label: latency_blocks(run) for run in runs}
    binned = {label: latency_bins(x, y, edges) for label, (x, y) in series.items()}
    rows = [
        {
            "time_ms": float(edges[i] / 1000),
            **{k: float(v[i]) for k, v in binned.items() if not np.isnan(v[i])},
        }
        for i in range(len(edges) - 1)
    ]
    csv = plotting.write_csv(
        out_dir / f"{stem}.csv",
        rows,
        ["time_ms", *binned],
        [
            *notes,
            f"output latency (ms): the largest mean over a block of {LATENCY_BLOCK} output "
            f"units among the blocks leaving in each {BIN_US / 1000:g} ms (empty: none left)",
        ],
    )
    fig, top, bottom, (lo, hi) = _two_panels(title, runs, end_us)
    for i, run in enumerate(runs):
        x, y = series[run.label]
        style = style_of(run.label, i)
        b = binned[run.label]
        keep = ~np.isnan(b)
        top.plot(edges[:-1][keep] / 1000, b[keep], label=run.label, lw=0.7, **style)
        sel = (x >= lo / 1000) & (x <= hi / 1000)
        bottom.plot(x[sel], y[sel], lw=0.9, **style)
    for th in thresholds_ms:
        for ax in (top, bottom):
            ax.axhline(th, color="0.5", ls=":", lw=0.8)
    _finish_panels(top, bottom, (lo, hi), "output latency (ms)")
    png = save_png(fig, out_dir / f"{stem}.png")
    return csv, png


SUMMARY_COLUMNS = [
    "policy",
    "peak_kb",
    "mean_kb",
    "peak_latency_ms",
    "mean_latency_ms",
    "outputs",
    "decisions",
    "switches",
    "flushes",
]


def summary_csv(out_dir: Path, stem: str, runs: Sequence[Run], notes: list[str]) -> Path:
    return plotting.write_csv(
        out_dir / f"{stem}_summary.csv", [r.summary() for r in runs], SUMMARY_COLUMNS, notes
    )


def run_notes(name: str, scale: float, seed: int, setup: str, duration: float) -> list[str]:
    return [
        f"streamon experiment {name} (Babcock et al., VLDB J. 2004, Sect. 6), simulator",
        f"scale={scale} seed={seed} simulated={duration / 1e6:g} s utilization={UTILIZATION}",
        f"ON/OFF arrivals: flows every {FLOW_SCALE_US / 1000:g} ms (Poisson), Pareto k="
        f"{FLOW_SCALE_US / 1000:g} ms alpha=2.3; memory unit {BYTES_PER_UNIT} bytes; "
        f"Round-Robin quantum {RR_QUANTUM_US:g} us",
        setup,
    ]
