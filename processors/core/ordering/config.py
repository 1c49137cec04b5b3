"""How an adaptive filter ordering is configured: the algorithm and its profiling knobs.

Defaults follow Table 1 of the A-Greedy paper (Babu et al., SIGMOD 2004): drop-profiling
probability 0.01 (0.005 for Independent), a profile window of 1000 profile tuples (500 for
Sweep, where it is also the length of a stage) and thrash-avoidance alpha = 0.9. The default
algorithm, A-Greedy+ (``agreedy``), departs from the paper's A-Greedy (``agreedy_exact``) as
docs/adaptive-filters.md explains: p is a maximum that it backs off from, and its window is
8000 profile tuples.

The algorithms are those of ``REOPTIMIZERS`` in :mod:`processors.core.ordering.reoptimizers`,
the one list of their names.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

_DEFAULT_P = {"independent": 0.005}
# A-Greedy+ empties its window when the statistics drift (processors.kernels.drift), so its
# window need not be short to follow change, and a longer one orders the deep positions on
# more profile tuples (docs/adaptive-filters.md)
_DEFAULT_WINDOW = {"sweep": 500, "agreedy": 8000}


class OrderingConfigError(ValueError):
    """An ordering configuration that makes no sense (names the offending setting)."""


def algorithms() -> tuple[str, ...]:
    """The names of the ordering algorithms: the keys of the re-optimizer registry.

    Looked up when a configuration is checked, not when this module is imported: the registry
    lives with the re-optimizers, which import numba kernels and this module, while a
    configuration is plain data that the logical plan carries (and the plan is read by
    processes that never order a filter).
    """
    from processors.core.ordering.reoptimizers import REOPTIMIZERS

    return tuple(REOPTIMIZERS)


@dataclass(frozen=True)
class OrderingConfig:
    """Settings of one filter stage's profiler and re-optimizer.

    ``window_ms`` switches the profile window from tuple-based to time-based (profile tuples of
    the last ``window_ms`` milliseconds, still capped at ``window_tuples`` entries).
    ``min_profile_tuples`` is how many profile tuples the window must hold before the
    re-optimizer acts, so that an empty or just-cleared window does not reorder on noise.
    ``costs`` fixes each filter's per-tuple cost (in filter order) instead of measuring it,
    for deterministic tests and for filters whose cost is known.
    """

    algorithm: str = "agreedy"  # a key of REOPTIMIZERS
    profile_probability: float | None = None  # None: Table 1 default for the algorithm
    window_tuples: int | None = None  # None: Table 1 default for the algorithm
    window_ms: int | None = None
    alpha: float = 0.9
    min_profile_tuples: int = 100
    costs: tuple[float, ...] | None = None
    cost_samples: int = 64  # per filter: the last N timed batches make up a_i
    seed: int = 0
    # A-Greedy+ only (algorithm "agreedy"; docs/adaptive-filters.md): a violation must be
    # confidence_z standard deviations significant (0: eq. 4 alone); p backs off to
    # p_floor * p while stable (1: never); drift is a pass-rate change beyond drift_effect
    confidence_z: float = 1.5
    p_floor: float = 0.0625
    drift_effect: float = 0.05
    # A-Caching in the MJoin (Babu et al., ICDE 2005; docs/caching.md): off unless enabled;
    # cache_memory_mb alone enables it. I (tuples), W (observations), the cost metric.
    caching: bool | None = None
    cache_memory_mb: float | None = None
    cache_interval: int = 10_000
    cache_window: int = 10
    cache_metric: str = "tuples"  # counted work, as the MJoin's join order costs; or "time"
    # the deltas a pipeline profiles without caches (Appendix A's p_i); None: the larger of
    # profile_probability and 0.05. Apart from A-Greedy's p, which may have to be high for
    # a rare drop to be seen soon while every cache-free delta costs the segments it skips
    cache_profile_probability: float | None = None

    def __post_init__(self) -> None:
        known = algorithms()
        if self.algorithm not in known:
            raise OrderingConfigError(
                f"unknown ordering algorithm {self.algorithm!r}; choose one of {known}"
            )
        p = self.p
        if not 0.0 <= p <= 1.0:
            raise OrderingConfigError(f"profile_probability must be in [0, 1], got {p}")
        if self.window < 1:
            raise OrderingConfigError(f"window_tuples must be at least 1, got {self.window}")
        if self.window_ms is not None and self.window_ms <= 0:
            raise OrderingConfigError(f"window_ms must be positive, got {self.window_ms}")
        if not 0.0 < self.alpha <= 1.0:
            raise OrderingConfigError(f"alpha must be in (0, 1], got {self.alpha}")
        if self.min_profile_tuples < 1:
            raise OrderingConfigError(
                f"min_profile_tuples must be at least 1, got {self.min_profile_tuples}"
            )
        if self.costs is not None and any(not c > 0 for c in self.costs):
            raise OrderingConfigError(f"costs must all be positive, got {self.costs}")
        if not self.confidence_z >= 0.0:
            raise OrderingConfigError(f"confidence_z must be >= 0, got {self.confidence_z}")
        if not 0.0 < self.p_floor <= 1.0:
            raise OrderingConfigError(f"p_floor must be in (0, 1], got {self.p_floor}")
        if not 0.0 <= self.drift_effect < 1.0:
            raise OrderingConfigError(f"drift_effect must be in [0, 1), got {self.drift_effect}")
        if self.cost_samples < 1:
            raise OrderingConfigError(f"cost_samples must be at least 1, got {self.cost_samples}")
        self._check_caching()

    def _check_caching(self) -> None:
        mb = self.cache_memory_mb
        if mb is not None and not mb >= 0:
            raise OrderingConfigError(f"cache_memory_mb must be a non-negative number, got {mb}")
        if self.caching is False and mb is not None:
            raise OrderingConfigError("cache_memory_mb is given but caching=False")
        if self.cache_interval < 1:
            raise OrderingConfigError(
                f"cache_interval must be at least 1 tuple, got {self.cache_interval}"
            )
        if self.cache_window < 1:
            raise OrderingConfigError(f"cache_window must be at least 1, got {self.cache_window}")
        cp = self.cache_profile_probability
        if cp is not None and not 0.0 < cp <= 1.0:
            raise OrderingConfigError(f"cache_profile_probability must be in (0, 1], got {cp}")
        if self.cache_metric not in ("time", "tuples"):
            raise OrderingConfigError(
                f"cache_metric must be 'time' or 'tuples', got {self.cache_metric!r}"
            )

    @property
    def caches_on(self) -> bool:
        """Whether the MJoin adapts subresult caches (caching=True, or a cache memory given)."""
        return bool(self.caching) or (self.caching is None and self.cache_memory_mb is not None)

    @property
    def cache_budget_bytes(self) -> float:
        """The caches' memory budget in bytes (unbounded when no cache_memory_mb is given)."""
        mb = self.cache_memory_mb
        return float("inf") if mb is None else float(mb) * 2**20

    @property
    def p(self) -> float:
        """The drop-profiling probability in effect."""
        if self.profile_probability is not None:
            return float(self.profile_probability)
        return _DEFAULT_P.get(self.algorithm, 0.01)

    @property
    def window(self) -> int:
        """The profile window's capacity in profile tuples."""
        if self.window_tuples is not None:
            return int(self.window_tuples)
        return _DEFAULT_WINDOW.get(self.algorithm, 1000)

    def for_joins(self) -> OrderingConfig:
        """The settings an MJoin's pipelines order with: A-Greedy+ (``agreedy``) becomes the
        paper's A-Greedy, since its profiling rate follows the filter stage's main-pass
        counters, which a join's probe pipelines do not keep (docs/adaptive-filters.md)."""
        return self.with_(algorithm="agreedy_exact") if self.algorithm == "agreedy" else self

    def with_(self, **changes: Any) -> OrderingConfig:
        return replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        return {
            "algorithm": self.algorithm,
            "profile_probability": self.p,
            "window_tuples": self.window,
            "window_ms": self.window_ms,
            "alpha": self.alpha,
            "min_profile_tuples": self.min_profile_tuples,
            "costs": list(self.costs) if self.costs is not None else None,
            "seed": self.seed,
            "confidence_z": self.confidence_z,
            "p_floor": self.p_floor,
            "drift_effect": self.drift_effect,
            "caching": self.caches_on,
            "cache_memory_mb": self.cache_memory_mb,
            "cache_interval": self.cache_interval,
            "cache_window": self.cache_window,
            "cache_metric": self.cache_metric,
        }

    @classmethod
    def from_mapping(cls, settings: dict[str, Any]) -> OrderingConfig:
        """From user settings (a query option or a TOML table); unknown keys are an error."""
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(settings) - known)
        if unknown:
            raise OrderingConfigError(
                f"unknown ordering setting(s) {unknown}; known: {sorted(known)}"
            )
        values = dict(settings)
        if values.get("costs") is not None:
            values["costs"] = tuple(float(c) for c in values["costs"])
        return cls(**values)
