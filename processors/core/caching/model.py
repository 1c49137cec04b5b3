"""The cost model of A-Caching (Babu et al., ICDE 2005, Sects. 4.1, 4.4, 5 and Appendix A).

Positions are 0-based: the paper's d_ij for operator j of pipeline i is ``stats[i].d[j - 1]``,
and ``d`` has one more entry than there are operators, the pipeline's output (the paper's
d_{i,k+1} after the last operator). Costs are per unit time under the unit-time metric the
paper uses; any unit works as long as ``d`` (tuples per unit time) and ``c`` (cost per tuple)
agree with the cache's probe and update costs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from processors.core.caching.candidates import Candidate


@dataclass(frozen=True)
class PipelineStats:
    """One pipeline's d_ij and c_ij (Sect. 4.1): ``d[p]`` tuples per unit time reaching
    operator p (``d[-1]``: the pipeline's results), ``c[p]`` the cost per tuple there."""

    d: tuple[float, ...]
    c: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.d) != len(self.c) + 1:
            raise ValueError(f"d needs one entry per operator plus the output: {self}")

    def work(self, start: int, end: int) -> float:
        """Sum of d_il c_il over operators ``start..end``: the segment's cost without a cache."""
        return float(sum(self.d[p] * self.c[p] for p in range(start, end + 1)))


@dataclass(frozen=True)
class CacheParams:
    """The per-cache statistics of Sect. 4.1: cost of one probe, of one insert or delete of
    a tuple, and the probability that a probe misses."""

    probe_cost: float
    update_cost: float
    miss_prob: float


def proc(cand: Candidate, stats: Sequence[PipelineStats], params: CacheParams) -> float:
    """proc(C_ijk) of Sect. 4.4: a probe for each of the d_ij tuples reaching the segment, and
    for the misses the segment's work plus inserting its d_{i,k+1} results."""
    s = stats[cand.pipeline]
    return s.d[cand.start] * params.probe_cost + params.miss_prob * (
        s.work(cand.start, cand.end) + s.d[cand.end + 1] * params.update_cost
    )


def benefit(cand: Candidate, stats: Sequence[PipelineStats], params: CacheParams) -> float:
    """benefit(C_ijk) of Sect. 4.1: the segment's work minus proc(C_ijk)."""
    return stats[cand.pipeline].work(cand.start, cand.end) - proc(cand, stats, params)


def update_rate(cand: Candidate, stats: Sequence[PipelineStats]) -> float:
    """Updates per unit time of the cached join: for each maintaining input l, the tuples its
    pipeline produces after its first ``len(maintained) - 1`` operators (the sum in Sect. 4.1's
    cost(C_ijk); over X union Y for a globally-consistent cache, Sect. 6)."""
    at = cand.update_position
    return float(sum(stats[r].d[at] for r in cand.maintained))


def cost(cand: Candidate, stats: Sequence[PipelineStats], params: CacheParams) -> float:
    """cost(C_ijk) of Sect. 4.1: update_cost times the update rate of the cached join (the
    updates themselves come from the regular pipelines, by the prefix invariant)."""
    return params.update_cost * update_rate(cand, stats)


def operator_proc(stats: Sequence[PipelineStats], pipeline: int, position: int) -> float:
    """proc of an operator seen as a zero-length cache (Sect. 4.4): d_ij c_ij, cost 0."""
    s = stats[pipeline]
    return s.d[position] * s.c[position]


def entry_tuples(cand: Candidate, stats: Sequence[PipelineStats]) -> float:
    """Average tuples in an entry, d_{i,k+1} / d_ij (Sect. 4.3, Appendix A)."""
    s = stats[cand.pipeline]
    return s.d[cand.end + 1] / s.d[cand.start] if s.d[cand.start] > 0 else 0.0


@dataclass(frozen=True)
class CostConstants:
    """Probe and update costs from the key size and the entry size (Sect. 3.3, Appendix A:
    a hash table on the key holding references to tuples). The constants are measured or
    calibrated by the runtime; a hit's cost grows with the tuples it hands on."""

    probe_base: float
    probe_per_key_column: float
    probe_per_tuple: float
    update_base: float
    update_per_key_column: float

    def probe_cost(self, key_width: int, entry_tuples: float) -> float:
        return (
            self.probe_base
            + self.probe_per_key_column * key_width
            + self.probe_per_tuple * entry_tuples
        )

    def update_cost(self, key_width: int) -> float:
        return self.update_base + self.update_per_key_column * key_width

    def params(
        self, cand: Candidate, stats: Sequence[PipelineStats], miss_prob: float
    ) -> CacheParams:
        """The candidate's CacheParams at the current statistics."""
        width = len(cand.key)
        return CacheParams(
            self.probe_cost(width, entry_tuples(cand, stats)), self.update_cost(width), miss_prob
        )


@dataclass(frozen=True)
class CacheSizing:
    """Bytes of an entry: a fixed overhead, the key's words, and one reference per input of
    the segment for each cached tuple (Sect. 3.3 caches references, never tuples)."""

    bytes_per_entry: int = 16
    bytes_per_key_column: int = 8
    bytes_per_ref: int = 8

    def entry_bytes(self, cand: Candidate, tuples: float) -> float:
        return (
            self.bytes_per_entry
            + self.bytes_per_key_column * len(cand.key)
            + self.bytes_per_ref * cand.length * tuples
        )


def expected_memory(
    cand: Candidate,
    stats: Sequence[PipelineStats],
    distinct_keys: float,
    sizing: CacheSizing | None = None,
) -> float:
    """Sect. 5: expected entries (the distinct probe keys, estimated with the Bloom filter of
    Appendix A) times the expected entry size (d_{i,k+1} / d_ij tuples)."""
    sizing = sizing or CacheSizing()
    return distinct_keys * sizing.entry_bytes(cand, entry_tuples(cand, stats))


def priority(net_benefit: float, memory: float) -> float:
    """Sect. 5: (benefit - cost) per byte; a cache needing no memory comes first."""
    if memory <= 0:
        return float("inf") if net_benefit > 0 else float("-inf")
    return net_benefit / memory


@dataclass(frozen=True)
class CacheEstimate:
    """What selection and allocation need of one candidate at the current statistics."""

    proc: float
    benefit: float
    cost: float
    memory: float

    @property
    def net(self) -> float:
        return self.benefit - self.cost


def estimate(
    cand: Candidate,
    stats: Sequence[PipelineStats],
    params: CacheParams,
    distinct_keys: float,
    sizing: CacheSizing | None = None,
) -> CacheEstimate:
    """proc, benefit, cost and expected memory of ``cand`` in one go."""
    p = proc(cand, stats, params)
    return CacheEstimate(
        proc=p,
        benefit=stats[cand.pipeline].work(cand.start, cand.end) - p,
        cost=cost(cand, stats, params),
        memory=expected_memory(cand, stats, distinct_keys, sizing),
    )
