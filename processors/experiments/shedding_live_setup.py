"""The set-up of ``streamon experiment shedding`` (issue 18) and its oracle, pure functions.

The query is a network-monitoring join: two routers' packet streams joined on the packet id
over 2-second RANGE windows, one worker, ``shed(max_latency_ms=500)``. The offered rate per
stream follows a ramp from ``low`` to ``high`` times the worker's measured capacity and back
(:class:`Ramp`). The oracle needs no engine: a result pairs an ``a`` and a ``b`` record of the
same pid with ``-window < a.ts - b.ts <= window`` (at equal times the engine handles the
first input's deltas first, a delete before an insert: an ``a`` record a window later than a
``b`` one still meets it, the reverse not), so every result is checked against the records
the generator wrote (precision) and the exact result is counted from them (recall).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

QUERY = """\
from processors.core.query import Query
from topics.avro import load_schema

schema = load_schema("packet")
query = Query({name!r})
query.stream("a", topic={a!r}, schema=schema, key="pid", timestamp="ts", partitions={parts})
query.stream("b", topic={b!r}, schema=schema, key="pid", timestamp="ts", partitions={parts})
query.window("a", range_ms={window_ms}).window("b", range_ms={window_ms})
query.join("a.pid", "b.pid").idle_timeout({idle_ms})
query.select(a_dst="a.dst", b_dst="b.dst", a_ts="a.ts", b_ts="b.ts").emit("istream")
query.into({result!r}, partitions={result_parts})
{shed}
"""


@dataclass(frozen=True)
class ShedSetup:
    """What the experiment runs; ``scaled`` shortens the phases (the CI's smoke run)."""

    pids: int = 300  # join key domain: a record meets about 2 * rate * window / pids others
    window_ms: int = 2_000
    partitions: int = 2  # of the inputs, the join and the result
    sampled_partitions: int = 1  # the join partitions whose results are read back and checked
    idle_ms: int = 1_000
    max_latency_ms: int = 500
    target_utilization: float = 0.8
    min_keep: float = 0.05
    low: float = 0.5  # offered load before and after the ramp, times the capacity
    high: float = 3.0  # at its top
    steady_s: float = 10.0  # at ``low`` before the ramp
    ramp_s: float = 15.0  # from low to high, and back
    top_s: float = 15.0  # at ``high``
    tail_s: float = 20.0  # at ``low`` after the ramp
    calibration_step_s: float = 5.0  # each rate of the staircase that measures the capacity
    calibration_start: float = 1_000.0  # records/s per input, the staircase's first step
    calibration_factor: float = 1.15  # each step's rate over the last
    calibration_steps: int = 24
    #: the staircase of shares at the ramp's top rate: from kept_start x capacity / offered,
    #: each kept_factor times the last (processors.experiments.shedding_live_run.calibrate_kept)
    kept_start: float = 0.75
    kept_factor: float = 1.06
    sample_every_s: float = 0.5
    seed: int = 0

    def scaled(self, scale: float) -> ShedSetup:
        if scale == 1.0:
            return self
        return replace(
            self, steady_s=self.steady_s * scale, ramp_s=self.ramp_s * scale,
            top_s=self.top_s * scale, tail_s=self.tail_s * scale,
            calibration_step_s=max(2.0, self.calibration_step_s * scale),
        )  # fmt: skip

    def calibration_rates(self) -> list[float]:
        return [round(self.calibration_start * self.calibration_factor**k)
                for k in range(self.calibration_steps)]  # fmt: skip

    def kept_shares(self, capacity: float) -> list[float]:
        """The shares the kept staircase tries at ``high`` x ``capacity``, up to keeping all."""
        first = self.kept_start / self.high
        n = int(np.ceil(np.log(1.0 / first) / np.log(self.kept_factor))) + 1
        return [min(1.0, round(first * self.kept_factor**k, 4)) for k in range(n)]

    def query_source(self, name: str, a: str, b: str, result: str, shed: bool) -> str:
        shed_call = (
            f"query.shed(max_latency_ms={self.max_latency_ms}, min_keep={self.min_keep}, "
            f"target_utilization={self.target_utilization})"
            if shed else ""
        )  # fmt: skip
        return QUERY.format(
            name=name, a=a, b=b, result=result, parts=self.partitions,
            result_parts=self.partitions,
            window_ms=self.window_ms, idle_ms=self.idle_ms, shed=shed_call,
        )  # fmt: skip


@dataclass(frozen=True)
class Ramp:
    """The offered rate per stream over time: ``low`` x capacity for ``steady_s``, up to
    ``high`` x in ``ramp_s``, ``top_s`` there, down again in ``ramp_s``, ``tail_s`` at ``low``."""

    capacity: float
    setup: ShedSetup

    @property
    def phases(self) -> list[tuple[float, float, float]]:
        """(duration s, factor at start, factor at end)."""
        s = self.setup
        return [(s.steady_s, s.low, s.low), (s.ramp_s, s.low, s.high), (s.top_s, s.high, s.high),
                (s.ramp_s, s.high, s.low), (s.tail_s, s.low, s.low)]  # fmt: skip

    @property
    def duration_s(self) -> float:
        return sum(d for d, _, _ in self.phases)

    @property
    def ramp_end_s(self) -> float:
        """When the rate is back at ``low``."""
        return sum(d for d, _, _ in self.phases[:4])

    def rate(self, t: float | np.ndarray) -> np.ndarray:
        """Records per second per stream at ``t`` seconds (0 after the end)."""
        t = np.asarray(t, np.float64)
        out = np.zeros_like(t)
        start = 0.0
        for d, f0, f1 in self.phases:
            inside = (t >= start) & (t < start + d)
            out = np.where(inside, self.capacity * (f0 + (f1 - f0) * (t - start) / d), out)
            start += d
        return out

    def overload(self) -> tuple[float, float]:
        """The span (s) when the offered rate exceeds the capacity."""
        s = self.setup
        if s.high <= 1.0:
            return (0.0, 0.0)
        up = s.steady_s + s.ramp_s * (1.0 - s.low) / (s.high - s.low)
        down = s.steady_s + s.ramp_s + s.top_s + s.ramp_s * (s.high - 1.0) / (s.high - s.low)
        return (up, down)

    def feasible_kept_fraction(
        self, span: tuple[float, float], kept_at_high: float | None = None,
        capacity: float | None = None,
    ) -> float:  # fmt: skip
        """The most the capacity lets a worker keep over ``span``: sum(min(rate, C)) /
        sum(rate), each input alike. With ``kept_at_high`` (the kept rate measured at the
        top, ``high`` x C offered: what reading the rest costs included), the most kept at a
        rate r between C and the top is interpolated linearly between C at C and that.
        ``capacity`` stands for C where another capacity is meant (the one within the
        latency bound); the ramp's rates stay those of the capacity it was built on."""
        c = self.capacity if capacity is None else capacity
        t = np.linspace(span[0], span[1], 2_001)
        r = self.rate(t)
        most = np.minimum(r, c)
        top = self.setup.high * self.capacity
        if kept_at_high is not None and top > c:
            over = np.clip((r - c) / (top - c), 0.0, 1.0)
            most = np.minimum(most, c + (kept_at_high - c) * over)
        return float(most.sum() / max(r.sum(), 1e-9))


@dataclass
class Sent:
    """What the generator wrote to one input: each record's ``dst`` (its number), pid, ts."""

    dst: np.ndarray
    pid: np.ndarray
    ts: np.ndarray


def sampled(s: Sent, partitions: int, sample: int) -> Sent:
    """The records of the join partitions below ``sample`` (the engine's routing by pid): their
    results are in the result partitions of the same numbers."""
    from processors.kernels.routing import route

    keep = route([s.pid], len(s.pid), partitions) < sample
    return Sent(s.dst[keep], s.pid[keep], s.ts[keep])


def exact_pairs(a: Sent, b: Sent, window_ms: int, since_ms: int | None = None) -> int:
    """How many results the exact join has: pairs of equal pid with ``-window < a.ts - b.ts
    <= window`` (only pairs of records both at or after ``since_ms`` if given)."""
    if since_ms is not None:
        a = _since(a, since_ms)
        b = _since(b, since_ms)
    if not len(a.ts) or not len(b.ts):
        return 0
    shift = np.int64(1) << np.int64(42)  # ts differences fit well below 2^42 ms
    base = min(int(a.ts.min()), int(b.ts.min()))
    key_b = np.sort(b.pid * shift + (b.ts - base))
    key_a = a.pid * shift + (a.ts - base)
    lo = np.searchsorted(key_b, key_a - window_ms, side="left")
    hi = np.searchsorted(key_b, key_a + (window_ms - 1), side="right")
    return int((hi - lo).sum())


def _since(s: Sent, since_ms: int) -> Sent:
    keep = s.ts >= since_ms
    return Sent(s.dst[keep], s.pid[keep], s.ts[keep])


def check_results(
    a: Sent, b: Sent, a_dst: np.ndarray, b_dst: np.ndarray, window_ms: int
) -> tuple[np.ndarray, int]:
    """Which results are in the exact join (a bool per result: both records were written,
    same pid, ``-window < a.ts - b.ts <= window``), and how many repeat an earlier one."""
    pos_a = np.searchsorted(a.dst, a_dst)
    pos_b = np.searchsorted(b.dst, b_dst)
    known = (pos_a < len(a.dst)) & (pos_b < len(b.dst))
    pos_a, pos_b = np.where(known, pos_a, 0), np.where(known, pos_b, 0)
    known &= (a.dst[pos_a] == a_dst) & (b.dst[pos_b] == b_dst)
    valid = known & (a.pid[pos_a] == b.pid[pos_b])
    gap = a.ts[pos_a] - b.ts[pos_b]
    valid &= (gap > -window_ms) & (gap <= window_ms)
    pairs = a_dst.astype(np.int64) * (int(b.dst.max(initial=0)) + 1) + b_dst.astype(np.int64)
    duplicates = len(pairs) - len(np.unique(pairs))
    return valid, int(duplicates)
