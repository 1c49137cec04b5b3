"""PNG plots of the analytics tables (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import pandas as pd

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (after choosing the backend)


def plot_latency(series: Any, path: Path, title: str) -> Path:
    """Sink latency per reporting window over time, and the histogram of the window means."""
    fig, (ax_t, ax_h) = plt.subplots(1, 2, figsize=(11, 4))
    for worker, rows in series.groupby("worker_id"):
        ax_t.plot(rows["time"], rows["latency_ms_avg"], label=f"{worker} mean", lw=1)
        ax_t.plot(rows["time"], rows["latency_ms_max"], label=f"{worker} max", lw=0.8, ls="--")
    ax_t.set_ylabel("output latency (ms)")
    ax_t.set_title("per one-second window")
    ax_t.tick_params(axis="x", labelrotation=30)
    if len(series):
        ax_t.legend(fontsize=7)
        ax_h.hist(series["latency_ms_avg"], bins=30, weights=series["batches"])
    ax_h.set_xlabel("window mean latency (ms)")
    ax_h.set_ylabel("output batches")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_plan_changes(changes: Any, path: Path, title: str) -> Path:
    """One lane per (agent, subject, partition); a marker per change, by kind."""
    fig, ax = plt.subplots(figsize=(11, 4))
    lanes: dict[str, int] = {}
    markers = {"filter_order": "o", "join_order": "s", "priorities": "^"}
    for kind, rows in changes.groupby("kind"):
        labels = [
            f"{a}/{s}" + ("" if pd.isna(p) else f"[{int(p)}]")
            for a, s, p in zip(rows["agent"], rows["subject"], rows["partition"], strict=True)
        ]
        ys = [lanes.setdefault(label, len(lanes)) for label in labels]
        ax.scatter(rows["time"], ys, marker=markers.get(str(kind), "x"), label=str(kind), s=18)
    ax.set_yticks(list(lanes.values()), list(lanes.keys()), fontsize=7)
    ax.set_xlabel("time")
    ax.tick_params(axis="x", labelrotation=30)
    if len(changes):
        ax.legend(fontsize=7)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_key_aggregates(table: Any, keys: list[str], column: str, path: Path, title: str) -> Path:
    """A bar per key (the first 30) of one aggregate column."""
    rows = table.head(30)
    labels = [" / ".join(str(v) for v in row) for row in rows[keys].itertuples(index=False)]
    fig, ax = plt.subplots(figsize=(11, 4))
    ax.bar(range(len(rows)), rows[column])
    ax.set_xticks(range(len(rows)), labels or [], rotation=60, fontsize=7)
    ax.set_ylabel(column)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
