"""The synthetic multi-way join workloads of Babu, Munagala, Widom, Motwani (A-Caching),
Section 7.1: the chain R(A) ⋈_A S(A,B) ⋈_B T(B) and the n-way join R1(A) ⋈_A ... ⋈_A Rn(A).

Values. Every join attribute takes values from one domain 0..domain-1, in the same order
(Section 7.1): each stream runs through the domain cyclically, emitting ``c(v)`` consecutive
copies of value v. With a stream's multiplicity m, ``c(v)`` is floor(m) or floor(m) + 1, the
extra copies going to round(frac(m) * domain) values picked at random, so one cycle is
``round(m * domain)`` tuples. A tuple-based window of exactly one cycle (``window_sizes``) holds
each value v exactly ``c(v)`` times at all times once it is full: a probe with any domain value
finds c(v) matches, m on average. That is how the paper's window sizes give the desired join
selectivity, and it holds whatever the streams' rates. S's A and B are the same value (same
domain, same order), so in T's pipeline a T tuple joins m_S * m_R tuples of R ⋈ S.

Rates. Relative rates default to the multiplicities (Section 7.1: the rate of ΔT is r times
that of ΔR and ΔS), which keeps the streams in step through the domain. Arrivals are uniform
(Section 7.1's default): rates are reduced to coprime integers λ_i, and every period of
Λ = Σ λ_i tuples holds λ_i tuples of stream i, the k-th at (k + 1/2) / λ_i of the period (ties:
lower stream first). Timestamps are globally unique: the merged sequence's g-th tuple has
``ts = start_ms + g``, so the MJoin's (ts, input) processing order is the arrival order.

Deterministic: only the choice of values with an extra copy is random (Generator(PCG64(seed))),
and any slice of the merged sequence is computed directly, so batches do not depend on how the
run is split into calls.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from numbers import Integral, Real
from typing import NamedTuple

import numpy as np

from processors.core.batch import Batch

MAX_PERIOD = 1_000_000  # Σ λ_i: the interleaving pattern is built once, this many slots
MAX_DOMAIN = 100_000_000


class JoinStream(NamedTuple):
    """One input of a join workload: its join columns (all carry the same value)."""

    name: str
    columns: tuple[str, ...]
    multiplicity: float
    rate: float


def _is_int(x: object) -> bool:
    return isinstance(x, Integral) and not isinstance(x, bool)


def _is_real(x: object) -> bool:
    return isinstance(x, Real) and not isinstance(x, bool) and math.isfinite(float(x))


def _check_common(
    multiplicities: tuple[float, ...],
    rates: tuple[float, ...] | None,
    domain: int,
    start_ms: int,
    seed: int,
    streams: int,
) -> None:
    if not _is_int(domain) or not 1 <= domain <= MAX_DOMAIN:
        raise ValueError(f"domain must be an integer in 1..{MAX_DOMAIN}, got {domain!r}")
    if len(multiplicities) != streams:
        raise ValueError(
            f"multiplicities needs one value per stream ({streams}), got {len(multiplicities)}"
        )
    for m in multiplicities:
        if not _is_real(m) or m <= 0 or round(float(m) * domain) < 1:
            raise ValueError(
                f"multiplicities must be finite numbers > 0 with round(m * domain) >= 1 "
                f"(domain={domain}), got {m!r}"
            )
    if rates is not None:
        if len(rates) != streams:
            raise ValueError(f"rates needs one value per stream ({streams}), got {len(rates)}")
        if not all(_is_real(r) and r > 0 for r in rates):
            raise ValueError(f"rates must be finite numbers > 0, got {rates!r}")
    if not _is_int(start_ms) or start_ms < 0:
        raise ValueError(f"start_ms must be an integer >= 0, got {start_ms!r}")
    if not _is_int(seed) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")


def _as_tuple(name: str, value: object) -> tuple:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(f"{name} must be a sequence of numbers, got {value!r}")
    return tuple(value)


@dataclass(frozen=True)
class ChainJoinWorkload:
    """R(A) ⋈_A S(A,B) ⋈_B T(B) (Section 7.1). Defaults: multiplicity 1 in R and S and
    r = 5 in T, rates proportional to the multiplicities (``rates=None``)."""

    multiplicities: Sequence[float] = (1.0, 1.0, 5.0)
    rates: Sequence[float] | None = None
    domain: int = 1000
    start_ms: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        mult = _as_tuple("multiplicities", self.multiplicities)
        rates = None if self.rates is None else _as_tuple("rates", self.rates)
        _check_common(mult, rates, self.domain, self.start_ms, self.seed, 3)
        object.__setattr__(self, "multiplicities", mult)
        object.__setattr__(self, "rates", rates)

    def streams(self) -> list[JoinStream]:
        rates = self.rates if self.rates is not None else self.multiplicities
        cols = (("a",), ("a", "b"), ("b",))
        return [
            JoinStream(name, c, float(m), float(r))
            for name, c, m, r in zip("RST", cols, self.multiplicities, rates, strict=True)
        ]


@dataclass(frozen=True)
class NWayJoinWorkload:
    """R1(A) ⋈_A ... ⋈_A Rn(A) (Section 7.1). Default multiplicities (Figure 9): 1 for the
    first floor(n/2) streams, 5 for the others; rates proportional to them."""

    n: int = 4
    multiplicities: Sequence[float] | None = None
    rates: Sequence[float] | None = None
    domain: int = 1000
    start_ms: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if not _is_int(self.n) or not 2 <= self.n <= 64:
            raise ValueError(f"n must be an integer in 2..64, got {self.n!r}")
        if self.multiplicities is None:
            mult: tuple = (1.0,) * (self.n // 2) + (5.0,) * (self.n - self.n // 2)
        else:
            mult = _as_tuple("multiplicities", self.multiplicities)
        rates = None if self.rates is None else _as_tuple("rates", self.rates)
        _check_common(mult, rates, self.domain, self.start_ms, self.seed, self.n)
        object.__setattr__(self, "multiplicities", mult)
        object.__setattr__(self, "rates", rates)

    def streams(self) -> list[JoinStream]:
        rates = self.rates if self.rates is not None else self.multiplicities
        return [
            JoinStream(f"R{i + 1}", ("a",), float(m), float(r))
            for i, (m, r) in enumerate(zip(self.multiplicities, rates, strict=True))  # type: ignore[arg-type]
        ]


JoinWorkload = ChainJoinWorkload | NWayJoinWorkload


def join_schemas(workload: JoinWorkload) -> dict[str, dict]:
    """Stream name -> Avro schema (join columns, then ts; all long), in batch column order."""
    return {
        s.name: {
            "type": "record",
            "name": s.name,
            "namespace": "streamon.workloads.joins",
            "fields": [{"name": c, "type": "long"} for c in (*s.columns, "ts")],
        }
        for s in workload.streams()
    }


def integer_rates(rates: Sequence[float]) -> list[int]:
    """The smallest integers in the ratio of ``rates`` (their exact decimal values)."""
    fracs = [Fraction(repr(float(r))) for r in rates]
    lcm = math.lcm(*(f.denominator for f in fracs))
    ints = [int(f * lcm) for f in fracs]
    g = math.gcd(*ints)
    return [i // g for i in ints]


class JoinWorkloadRun:
    """A running join workload: the merged arrival sequence, cut into per-stream batches."""

    def __init__(self, workload: JoinWorkload) -> None:
        self.workload = workload
        specs = workload.streams()
        self.streams: list[JoinStream] = specs
        self.stream_names: list[str] = [s.name for s in specs]
        domain = workload.domain
        rng = np.random.Generator(np.random.PCG64(workload.seed))
        counts = np.empty((len(specs), domain), np.int64)
        for i, s in enumerate(specs):
            whole = math.floor(s.multiplicity)
            extra = round(s.multiplicity * domain) - whole * domain
            counts[i] = whole
            if extra:
                counts[i, rng.choice(domain, size=extra, replace=False)] += 1
        self.value_counts: np.ndarray = counts
        self._cum = np.cumsum(counts, axis=1)
        self.window_sizes: list[int] = [int(c) for c in self._cum[:, -1]]

        self.rates: list[int] = integer_rates([s.rate for s in specs])
        self.period = sum(self.rates)
        if self.period > MAX_PERIOD:
            raise ValueError(
                f"rates reduce to integers {self.rates} summing to {self.period} > {MAX_PERIOD}: "
                "use simpler ratios"
            )
        stream = np.repeat(np.arange(len(specs)), self.rates)
        k = np.concatenate([np.arange(r) for r in self.rates])
        at = (2 * k + 1) / (2 * np.repeat(np.array(self.rates, np.float64), self.rates))
        order = np.lexsort((stream, at))  # equal rationals are equal floats: ties by stream
        self._pattern = stream[order]
        self._rank = k[order]
        self._slots = [np.flatnonzero(self._pattern == i) for i in range(len(specs))]
        self._generated = 0

    @property
    def tuples_generated(self) -> int:
        return self._generated

    @property
    def multiplicities(self) -> np.ndarray:
        """Mean copies per domain value in each stream's full window (``window / domain``)."""
        return self.value_counts.mean(axis=1)

    def global_index(self, stream: int, local: int | np.ndarray) -> np.ndarray:
        """Position in the merged sequence (= ts - start_ms) of a stream's ``local``-th tuple."""
        j = np.asarray(local, np.int64)
        rate = self.rates[stream]
        return (j // rate) * self.period + self._slots[stream][j % rate]

    @property
    def fill_tuples(self) -> int:
        """Merged tuples after which every stream has filled its window (one full cycle)."""
        return int(max(self.global_index(i, w - 1) for i, w in enumerate(self.window_sizes))) + 1

    def values(self, stream: int, local: np.ndarray) -> np.ndarray:
        """Join value of a stream's tuples number ``local`` (int64)."""
        q = np.asarray(local, np.int64) % self.window_sizes[stream]
        return np.searchsorted(self._cum[stream], q, side="right").astype(np.int64)

    def next_batches(self, count: int) -> list[Batch]:
        """The next ``count`` tuples of the merged sequence, one insert batch per stream (in
        ``stream_names`` order, possibly empty). Columns: the stream's join columns, then ts
        (= the batch's ts); int64."""
        if not _is_int(count) or count < 0:
            raise ValueError(f"count must be an integer >= 0, got {count!r}")
        g = np.arange(self._generated, self._generated + int(count), dtype=np.int64)
        self._generated += int(count)
        period, pos = np.divmod(g, self.period)
        which = self._pattern[pos]
        batches = []
        for i, spec in enumerate(self.streams):
            mine = which == i
            local = period[mine] * self.rates[i] + self._rank[pos[mine]]
            vals = self.values(i, local)
            ts = self.workload.start_ms + g[mine]
            cols = {c: vals.copy() for c in spec.columns}
            cols["ts"] = ts
            batch = Batch.inserts(cols, ts)
            batch.meta["stream"] = spec.name
            batches.append(batch)
        return batches
