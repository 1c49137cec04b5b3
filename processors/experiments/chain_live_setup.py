"""The set-up of ``streamon experiment chain-live`` (:mod:`processors.experiments.chain_live`
says what it measures): the charts, the query, the expected results, the bursty schedule and what
one policy's run records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from processors.core.scheduling.progress import chains, chart_from_points
from processors.stages.synthetic_stage import copies
from processors.workloads.bursty import steady_with_bursts

#: Sect. 6.1.1's four-operator chart: a fast, selective third operator hidden behind a slow one
FOUR_OPERATORS = [(0, 1.0), (400, 0.9), (2000, 0.88), (2200, 0.1), (4000, 0.0)]


@dataclass(frozen=True)
class LiveChart:
    """A progress chart of Sect. 6 run live: points, and the name of its output files."""

    name: str
    title: str
    points: tuple[tuple[float, float], ...]


CHARTS = {
    "chain-live": LiveChart("chain_live", "four operators", tuple(FOUR_OPERATORS)),
    # Sect. 6.1.1, Figs. 4-5: a fast selective operator, then a slow one
    "chain-live-two-ops": LiveChart(
        "chain_live_two_ops", "two operators", ((0, 1.0), (500, 0.3), (4000, 0.0))
    ),
    # Sect. 6.1.2, Fig. 8: a join with a stored relation (s > 1) before a fast selective one
    "chain-live-stored-join": LiveChart(
        "chain_live_stored_join",
        "join with a stored relation, s > 1",
        ((0, 1.0), (400, 0.9), (1300, 2.0), (1500, 0.2), (4000, 0.0)),
    ),  # fmt: skip
}
SCHEMA = "reading"  # sensor_id carries the sequence number, ts the arrival time in ms

QUERY_TEMPLATE = """\
from processors.core.query import Query
from topics.avro import load_schema

query = Query({name!r})
query.stream("r", topic={topic!r}, schema=load_schema("reading"), key="sensor_id",
             timestamp="ts", partitions=1)
{operators}
query.schedule({policy!r}, **{settings!r})
query.into({result!r}, partitions=1)
"""


@dataclass(frozen=True)
class LiveSetup:
    """The experiment's knobs (times in seconds unless named otherwise)."""

    time_scale: float = 0.1  # real µs of CPU per unit of the chart's time axis (µs in the paper)
    payload_bytes: int = 200
    burst_factor: float = 1.4  # burst rate over the measured capacity
    base_factor: float = 0.25  # steady rate over the measured capacity
    chain1_margin: float = 0.85  # the burst stays below this share of Chain's first chain
    lead_s: float = 4.0  # steady input before the burst
    burst_s: float = 15.0
    tail_s: float = 6.0  # steady input after the burst
    quantum_ms: float = 5.0
    sample_every_s: float = 0.1
    seed: int = 0

    def scaled(self, scale: float) -> LiveSetup:
        """Shorter (or longer) phases for ``--scale``."""
        from dataclasses import replace

        return replace(
            self,
            lead_s=max(self.lead_s * scale, 1.0),
            burst_s=max(self.burst_s * scale, 2.0),
            tail_s=max(self.tail_s * scale, 2.0),
        )


def chart_operators(
    points: list[tuple[float, float]], time_scale: float
) -> list[tuple[float, float]]:
    """(cost in µs per tuple received, selectivity) of each operator of a progress chart.

    The chart's last operator ejects its output (size 0); here it keeps every tuple (s = 1) so
    that the results can be checked, and the sink after it does the ejecting.
    """
    pts = chart_from_points(points)
    ops = []
    for (t0, s0), (t1, s1) in zip(pts, pts[1:], strict=False):
        cost = (t1 - t0) / s0 * time_scale
        ops.append((cost, s1 / s0 if s1 > 0 else 1.0))
    return ops


def first_chain_share(points: list[tuple[float, float]]) -> float:
    """The share of a tuple's processing time spent on the chart's first chain (Sect. 4.1)."""
    pts = chart_from_points(points)
    first = chains(pts)[0]
    return float(first.t_end - first.t_start) / float(pts[-1][0])


def query_source(
    name: str, topic: str, result: str, ops: list[tuple[float, float]], policy: str,
    settings: dict[str, Any],
) -> str:  # fmt: skip
    lines = [
        f"query.operator('op{i + 1}', cost_us={cost!r}, selectivity={sel!r}, key='r.sensor_id')"
        for i, (cost, sel) in enumerate(ops)
    ]
    return QUERY_TEMPLATE.format(
        name=name, topic=topic, result=result, operators="\n".join(lines), policy=policy,
        settings=settings,
    )  # fmt: skip


def expected_results(n: int, ops: list[tuple[float, float]]) -> np.ndarray:
    """How many times each sequence number 0..n-1 comes out (the operators' hash rule)."""
    counts = np.ones(n, np.int64)
    for i, (_, sel) in enumerate(ops):
        name = f"op{i + 1}"
        keep = np.fromiter((copies(k, name, sel) for k in range(n)), np.int64, count=n)
        counts *= keep
    return counts


@dataclass
class Schedule:
    """Arrival offsets (seconds from the run's start) and what they describe."""

    offsets: np.ndarray
    base_rate: float
    burst_rate: float
    burst: tuple[float, float]  # start, length
    duration: float


def burst_schedule(base_rate: float, burst_rate: float, setup: LiveSetup) -> Schedule:
    """Steady input with one burst, as a seeded Poisson process."""
    duration = setup.lead_s + setup.burst_s + setup.tail_s
    offsets = steady_with_bursts(
        duration, base_rate, [(setup.lead_s, setup.burst_s, burst_rate)], poisson=True,
        seed=setup.seed,
    )  # fmt: skip
    return Schedule(offsets, base_rate, burst_rate, (setup.lead_s, setup.burst_s), duration)


@dataclass
class RunResult:
    policy: str
    settings: dict[str, Any]
    samples: list[dict[str, Any]] = field(default_factory=list)
    latencies: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    results: int = 0
    expected: int = 0
    missing: int = 0
    duplicates: int = 0
    drained_s: float = 0.0
    status: dict[str, Any] = field(default_factory=dict)

    @property
    def peak_bytes(self) -> int:
        return max((s["queued_bytes"] for s in self.samples), default=0)

    @property
    def peak_tuples(self) -> int:
        return max((s["queued_tuples"] for s in self.samples), default=0)

    @property
    def peak_latency_ms(self) -> float:
        return float(self.latencies[:, 1].max()) if len(self.latencies) else 0.0

    @property
    def mean_latency_ms(self) -> float:
        return float(self.latencies[:, 1].mean()) if len(self.latencies) else 0.0

    def arbiter(self) -> dict[str, Any]:
        return dict(self.status.get("scheduling", {}).get("arbiter", {}))
