"""How a query's agents share a worker's processor: the scheduling policy and its settings.

Chain (Babcock et al., Sect. 4.1) is the default: it keeps the data queued between stages
smallest during bursts. Chain-Flush (Sect. 5.2) adds a latency threshold, Mixed(gamma) (Sect.
5.3) trades memory for latency without one; FIFO, Round-Robin and Greedy are the baselines the
paper compares against; ``off`` leaves the order to Faust (no arbiter). The policies are those
of the registry ``POLICIES`` in :mod:`processors.core.scheduling.policies`, plus ``off``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from processors.core.scheduling.policies import POLICIES as _REGISTRY

#: the policies a query or ``streamon control`` may set: the registry's, and ``off``
POLICY_NAMES: tuple[str, ...] = (*_REGISTRY, "off")
#: most tuples an agent may process per grant before the arbiter decides again (Sect. 5.2
#: suggests a bound, "e.g. 1000", so that a long queue cannot hold the processor; here the time
#: quantum below is what bounds a turn, and this cap only keeps cheap stages' batches at the
#: size they are fastest at)
DEFAULT_GRANT_TUPLES = 16_384
#: how long a granted turn should last: an agent processes about this much of its measured work
#: before the arbiter decides again (short enough to preempt, long enough to keep the per-turn
#: cost of Kafka and Faust small)
DEFAULT_QUANTUM_MS = 10.0


class SchedulingConfigError(ValueError):
    """A scheduling setting that makes no sense; the message names it."""


@dataclass(frozen=True)
class SchedulingConfig:
    """A policy name and its settings (checked on construction)."""

    policy: str = "chain"
    latency_ms: float | None = None  # Chain-Flush: the query's latency threshold
    gamma: float | None = None  # Mixed: slope threshold, in tuples per second of processing
    grant_tuples: int = DEFAULT_GRANT_TUPLES
    quantum_ms: float = DEFAULT_QUANTUM_MS
    #: how far back the scheduler looks when it turns statistics into progress charts
    stats_window_s: float = 5.0

    def __post_init__(self) -> None:
        if self.policy not in POLICY_NAMES:
            raise SchedulingConfigError(
                f"unknown scheduling policy {self.policy!r}; use one of {', '.join(POLICY_NAMES)}"
            )
        if self.policy == "chain-flush" and self.latency_ms is None:
            raise SchedulingConfigError("policy chain-flush needs latency_ms (the threshold)")
        if self.latency_ms is not None and not (
            math.isfinite(self.latency_ms) and self.latency_ms > 0
        ):
            raise SchedulingConfigError(f"latency_ms must be > 0, not {self.latency_ms!r}")
        if self.policy == "mixed" and self.gamma is None:
            raise SchedulingConfigError("policy mixed needs gamma (the slope threshold)")
        if self.gamma is not None and not (math.isfinite(self.gamma) and self.gamma >= 0):
            raise SchedulingConfigError(f"gamma must be >= 0, not {self.gamma!r}")
        if not isinstance(self.grant_tuples, int) or self.grant_tuples < 1:
            raise SchedulingConfigError(
                f"grant_tuples must be an int >= 1, not {self.grant_tuples!r}"
            )
        if not (
            isinstance(self.quantum_ms, int | float)
            and math.isfinite(self.quantum_ms)
            and self.quantum_ms > 0
        ):
            raise SchedulingConfigError(f"quantum_ms must be > 0, not {self.quantum_ms!r}")
        if not (math.isfinite(self.stats_window_s) and self.stats_window_s > 0):
            raise SchedulingConfigError(f"stats_window_s must be > 0, not {self.stats_window_s!r}")

    @classmethod
    def from_mapping(cls, settings: Mapping[str, Any]) -> SchedulingConfig:
        """From JSON or keyword settings; an unknown key is named."""
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(settings) - known)
        if unknown:
            raise SchedulingConfigError(
                f"unknown scheduling setting(s) {', '.join(unknown)}; known: "
                f"{', '.join(sorted(known))}"
            )
        return cls(**dict(settings))

    def with_(self, **changes: Any) -> SchedulingConfig:
        return replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
