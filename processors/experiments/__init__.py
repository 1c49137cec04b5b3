"""Reproductions of the papers' experiments (CSV and PNG), added with the adaptive stages.

``EXPERIMENTS`` (every experiment name: filters', joins', scheduling's) and
:func:`run_experiment` are what ``streamon experiment`` uses. The modules are imported on first
use only: they pull in numba and matplotlib, which importing ``processors.experiments.plotting``
alone should not.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any


def _registries() -> list[tuple[dict[str, Callable[[Path, float, int], list[Path]]], Any]]:
    """(EXPERIMENTS, run_experiment) of each experiment module."""
    from processors.experiments import (
        acache_fig11,
        acache_fig12,
        acache_joins,
        acache_memory,
        caching,
        cost,
        filters,
        joins,
        scheduling,
    )

    return [
        (acache_fig11.EXPERIMENTS, acache_fig11.run_experiment),
        (acache_fig12.EXPERIMENTS, acache_fig12.run_experiment),
        (acache_joins.EXPERIMENTS, acache_joins.run_experiment),
        (acache_memory.EXPERIMENTS, acache_memory.run_experiment),
        (caching.EXPERIMENTS, caching.run_experiment),
        (cost.EXPERIMENTS, cost.run_experiment),
        (filters.EXPERIMENTS, filters.run_experiment),
        (joins.EXPERIMENTS, joins.run_experiment),
        (scheduling.EXPERIMENTS, scheduling.run_experiment),
    ]


def all_experiments() -> dict[str, Callable[[Path, float, int], list[Path]]]:
    """Every experiment by name."""
    out: dict[str, Callable[[Path, float, int], list[Path]]] = {}
    for registry, _ in _registries():
        out.update(registry)
    return out


def run_experiment(name: str, out_dir: Path, scale: float = 1.0, seed: int = 0) -> list[Path]:
    """Run one experiment by name with its module's runner (which quiets that stage's log)."""
    for registry, run in _registries():
        if name in registry:
            return run(name, out_dir, scale=scale, seed=seed)
    raise ValueError(f"unknown experiment {name!r}; choose one of {sorted(all_experiments())}")


def _live(name: str) -> Callable[..., list[Path]]:
    def run(
        out_dir: Path, scale: float = 1.0, seed: int = 0, json_path: str | None = None
    ) -> list[Path]:
        from processors.experiments.chain_live import CHARTS, run_chain_live

        return run_chain_live(
            out_dir, scale=scale, seed=seed, json_path=Path(json_path) if json_path else None,
            chart=CHARTS[name],
        )  # fmt: skip

    return run


def _shedding(
    out_dir: Path, scale: float = 1.0, seed: int = 0, json_path: str | None = None
) -> list[Path]:
    from processors.experiments.shedding_live import run_shedding_live

    return run_shedding_live(
        out_dir, scale=scale, seed=seed, json_path=Path(json_path) if json_path else None
    )


#: experiments that run workers on a broker (minutes each): by name only, never in "all"
LIVE_EXPERIMENTS: dict[str, Callable[..., list[Path]]] = {
    **{n: _live(n) for n in ("chain-live", "chain-live-two-ops", "chain-live-stored-join")},
    "shedding": _shedding,
}


def __getattr__(name: str) -> Any:
    if name == "EXPERIMENTS":
        return all_experiments()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
