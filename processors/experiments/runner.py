"""The one experiment runner: name checks, scale checks and quiet stage logs for every module.

Each experiment module keeps its own ``EXPERIMENTS`` registry and exposes
``run_experiment = runner(EXPERIMENTS)``; :mod:`processors.experiments` runs any of them by name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path

#: what every experiment is: (output directory, scale, seed) -> the files written
Experiment = Callable[[Path, float, int], list[Path]]
Runner = Callable[..., list[Path]]

# stages log every order change at INFO; experiments make thousands of them
QUIET_LOGS = (
    "processors.stages.filter_stage",
    "processors.stages.mjoin_stage",
    "processors.stages.mjoin_caches",
)


def run_named(
    experiments: Mapping[str, Experiment],
    name: str,
    out_dir: Path,
    scale: float = 1.0,
    seed: int = 0,
) -> list[Path]:
    """Run one experiment by name; returns the files written (CSVs first, then PNGs)."""
    if name not in experiments:
        raise ValueError(f"unknown experiment {name!r}; choose one of {sorted(experiments)}")
    if not scale > 0:
        raise ValueError(f"scale must be positive, got {scale}")
    logs = [logging.getLogger(q) for q in QUIET_LOGS]
    levels = [log.level for log in logs]
    for log in logs:
        log.setLevel(logging.WARNING)
    try:
        return experiments[name](Path(out_dir), scale, seed)
    finally:
        for log, level in zip(logs, levels, strict=True):
            log.setLevel(level)


def runner(experiments: Mapping[str, Experiment]) -> Runner:
    """``run_experiment(name, out_dir, scale=1.0, seed=0)`` over one registry."""

    def run_experiment(name: str, out_dir: Path, scale: float = 1.0, seed: int = 0) -> list[Path]:
        """Run one experiment by name; returns the files written (CSVs first, then PNGs)."""
        return run_named(experiments, name, out_dir, scale, seed)

    return run_experiment
