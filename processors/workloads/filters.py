"""The synthetic pipelined-filter workload of Babu et al., Section 9.

n filters F_1..F_n run on a stream S_0; F_i passes a tuple iff the tuple's key ``k{i-1}`` is in
a hash index over a sliding window of another stream S_i (one pipeline of an MJoin, Section 8).
The generator decides first what each filter returns for each tuple (the truth) and then picks
keys that make the probe come out that way: a passing key is drawn from S_i's current window, a
failing key is odd while every window key is even. So the truth matrix is exactly what a probe
of :attr:`FilterWorkloadRun.indexes` returns, and filter costs are real hash probes.

Correlation (Section 9.2, Table 1): the filters form ceil(n/Γ) groups of Γ consecutive filters
(the last one may be smaller). Filters of different groups are independent; two filters of the
same group agree on a fraction ``agreement`` (0.8 in the paper) of the tuples. Construction, per
tuple and group: a shared bit ~ Bernoulli(s); each member copies it with probability q and
otherwise draws its own Bernoulli(s). Every member passes with probability s, and two members
agree with probability q^2 + (1 - q^2) * (s^2 + (1-s)^2), which :func:`copy_probability` solves
for q. When independent draws already agree more often than asked (s near 0 or 1), q = 0 and
the agreement is that of independent filters, s^2 + (1-s)^2.

Adaptivity (Section 9.4): every ``change_every`` tuples the group selectivities are permuted by a
seeded random permutation (which may be the identity, as a random permutation may).

Randomness: a Generator(PCG64(seed)) draws two 64-bit stream keys and then the permutations;
the per-tuple and per-arrival random words are SplitMix64 outputs at counters (tuple number,
word) and (arrival number, stream) under those keys. Being counter-based, they are computed
inside the kernel with no buffers. The truth matrix, the failing keys and the window contents
after any number of tuples do not depend on how the tuples are split into batches; the passing
keys do, through the moment the windows slide (once per batch, before the batch's tuples).
Probabilities are resolved to 2^-32.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from numbers import Integral, Real

import numpy as np
from numba import njit

from processors.core.batch import Batch
from processors.kernels.hash_index import HashIndex
from processors.kernels.splitmix import GAMMA, mix64

_S32 = np.uint64(32)
_U1 = np.uint64(1)
_LO32 = np.uint64(0xFFFFFFFF)
_EVEN = np.uint64(0xFFFFFFFFFFFFFFFE)
_SCALE = float(1 << 32)


def pair_agreement(selectivity: float, copy: float) -> float:
    """Probability that two members of a group agree, given s and the copy probability q."""
    independent = selectivity**2 + (1.0 - selectivity) ** 2
    return copy**2 + (1.0 - copy**2) * independent


def copy_probability(selectivity: float, agreement: float) -> float:
    """The q for which two members of a group with selectivity s agree with probability
    ``agreement`` (0 if independent members already agree at least that often)."""
    independent = selectivity**2 + (1.0 - selectivity) ** 2
    if independent >= agreement:
        return 0.0
    return math.sqrt((agreement - independent) / (1.0 - independent))


def _is_int(x: object) -> bool:
    return isinstance(x, Integral) and not isinstance(x, bool)


def _is_real(x: object) -> bool:
    return isinstance(x, Real) and not isinstance(x, bool) and math.isfinite(float(x))


@dataclass(frozen=True)
class FilterWorkload:
    """Parameters of the Section 9 workload (defaults from Table 1).

    ``selectivity`` is one value for every group or one per group; ``costs`` (probes per tuple,
    the cost c of Section 9.3) is one value for every filter or one per filter. ``window_rate``
    is the number of S_i arrivals per S_0 tuple (its decimal value, exactly).
    """

    n: int
    gamma: int = 2
    selectivity: float | Sequence[float] = 0.5
    costs: int | Sequence[int] = 1
    window: int = 10_000
    window_rate: float = 0.1
    change_every: int | None = None
    agreement: float = 0.8
    seed: int = 0

    def __post_init__(self) -> None:
        if not _is_int(self.n) or self.n < 1:
            raise ValueError(f"n must be an integer >= 1, got {self.n!r}")
        if not _is_int(self.gamma) or self.gamma < 1:
            raise ValueError(f"gamma must be an integer >= 1, got {self.gamma!r}")
        groups = self.n_groups
        if isinstance(self.selectivity, Sequence):
            sel = tuple(self.selectivity)
            if len(sel) != groups:
                raise ValueError(
                    f"selectivity needs one value per group ({groups} groups of gamma="
                    f"{self.gamma} for n={self.n}), got {len(sel)}"
                )
            object.__setattr__(self, "selectivity", sel)
        else:
            sel = (self.selectivity,)
        if not all(_is_real(s) and 0.0 <= s <= 1.0 for s in sel):
            raise ValueError(f"selectivity values must be in [0, 1], got {self.selectivity!r}")
        if isinstance(self.costs, Sequence):
            costs = tuple(self.costs)
            if len(costs) != self.n:
                raise ValueError(f"costs needs one value per filter (n={self.n}), got {len(costs)}")
            object.__setattr__(self, "costs", costs)
        else:
            costs = (self.costs,)
        if not all(_is_int(c) and c >= 1 for c in costs):
            raise ValueError(f"costs must be integers >= 1, got {self.costs!r}")
        if not _is_int(self.window) or not 1 <= self.window <= 2**31:
            raise ValueError(f"window must be an integer in 1..2**31, got {self.window!r}")
        if not _is_real(self.window_rate) or self.window_rate < 0:
            raise ValueError(f"window_rate must be a finite number >= 0, got {self.window_rate!r}")
        if self.change_every is not None and (
            not _is_int(self.change_every) or self.change_every < 1
        ):
            raise ValueError(
                f"change_every must be None or an integer >= 1, got {self.change_every!r}"
            )
        if not _is_real(self.agreement) or not 0.0 <= self.agreement <= 1.0:
            raise ValueError(f"agreement must be in [0, 1], got {self.agreement!r}")
        if not _is_int(self.seed) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")

    @property
    def n_groups(self) -> int:
        return -(-self.n // self.gamma)

    @property
    def group_of(self) -> np.ndarray:
        """Group number of each filter (int64, length n)."""
        return np.arange(self.n, dtype=np.int64) // self.gamma

    @property
    def group_selectivities(self) -> np.ndarray:
        """Initial selectivity of each group (float64, length n_groups)."""
        if isinstance(self.selectivity, tuple):
            return np.array(self.selectivity, np.float64)
        return np.full(self.n_groups, float(self.selectivity))

    @property
    def probes(self) -> list[int]:
        """Probes per tuple (cost) of each filter."""
        if isinstance(self.costs, tuple):
            return [int(c) for c in self.costs]
        return [int(self.costs)] * self.n


@njit(cache=True, inline="always")
def _word(stream: np.uint64, counter: int) -> np.uint64:
    """Random word number ``counter`` of a stream: SplitMix64 (state ``stream``, the output
    mix of the state after counter+1 steps), so any word can be computed directly."""
    return mix64(stream + (np.uint64(counter) + _U1) * GAMMA)


@njit(cache=True)
def _window_keys(stream: np.uint64, first: int, count: int, n: int) -> np.ndarray:
    """Keys of arrivals first..first+count-1 on each of S_1..S_n, shape (n, count): even and
    non-negative, so that odd keys are never in a window."""
    out = np.empty((n, count), np.int64)
    for j in range(count):
        base = (first + j) * n
        for i in range(n):
            out[i, j] = np.int64((_word(stream, base + i) >> _U1) & _EVEN)
    return out


def _thresholds(probabilities: np.ndarray) -> np.ndarray:
    """Probabilities as thresholds on a uniform 32-bit draw (p = threshold / 2^32)."""
    return np.round(np.asarray(probabilities, np.float64) * _SCALE).astype(np.uint64)


@njit(cache=True)
def _fill(
    stream: np.uint64,
    start: int,
    group_of: np.ndarray,
    thr_s: np.ndarray,
    thr_q: np.ndarray,
    seg_end: np.ndarray,
    rings: np.ndarray,
    keys_out: np.ndarray,
    passes: np.ndarray,
) -> None:
    """Truth and keys of tuples start.. (one batch).

    Tuple t uses words t*(groups + 2n) + ...: one per group (its shared bit), then two per
    filter: the copy coin (low half) and the filter's own bit (high half), and the window slot
    (high half) or the failing key. ``seg_end[s]`` is the batch row where selectivity segment s
    (row s of the thresholds) ends. Arithmetic selects instead of branches: the outcomes are
    random, and branching on them mispredicts half the time.
    """
    size = passes.shape[0]
    n = group_of.shape[0]
    groups = thr_s.shape[1]
    words = groups + 2 * n
    uw = np.uint64(rings.shape[1])
    shared = np.empty(groups, np.int64)
    s = 0
    for t in range(size):
        while t >= seg_end[s]:
            s += 1
        base = (start + t) * words
        for g in range(groups):
            shared[g] = np.int64((_word(stream, base + g) >> _S32) < thr_s[s, g])
        for i in range(n):
            g = group_of[i]
            a = _word(stream, base + groups + 2 * i)
            b = _word(stream, base + groups + 2 * i + 1)
            copy = np.int64((a & _LO32) < thr_q[s, g])
            own = np.int64((a >> _S32) < thr_s[s, g])
            p = (copy & shared[g]) | ((1 - copy) & own)
            hit_key = rings[i, np.int64(((b >> _S32) * uw) >> _S32)]
            miss_key = np.int64(b >> _U1) | 1
            passes[t, i] = p
            keys_out[i, t] = miss_key ^ ((miss_key ^ hit_key) & -p)


class FilterWorkloadRun:
    """A running instance of a :class:`FilterWorkload`: windows, indexes and S_0 batches."""

    def __init__(self, workload: FilterWorkload) -> None:
        self.workload = workload
        w = workload
        self._rng = np.random.Generator(np.random.PCG64(w.seed))
        self._tuple_stream, self._window_stream = self._rng.bit_generator.random_raw(2)
        rate = Fraction(repr(float(w.window_rate)))
        self._rate_num, self._rate_den = rate.numerator, rate.denominator
        self.column_names: list[str] = [f"k{i}" for i in range(w.n)]
        self.probes: list[int] = w.probes
        self.group_of: np.ndarray = w.group_of
        self.changes: list[int] = []
        self._group_sel = w.group_selectivities
        self._generated = 0
        self._head = 0  # ring slot of the oldest window key (the same on every stream)
        self._arrivals = w.window  # arrivals 0..window-1 fill the windows
        self._rings = _window_keys(self._window_stream, 0, w.window, w.n)
        self.indexes: list[HashIndex] = []
        for i in range(w.n):
            index = HashIndex(w.window)
            index.insert_many(self._rings[i])
            self.indexes.append(index)

    @property
    def tuples_generated(self) -> int:
        return self._generated

    @property
    def current_selectivities(self) -> np.ndarray:
        """Selectivity of each filter for the last tuple generated (initially, the first)."""
        return self._group_sel[self.group_of]

    @property
    def group_selectivities(self) -> np.ndarray:
        return self._group_sel.copy()

    def _arrivals_before(self, tuples: int) -> int:
        return tuples * self._rate_num // self._rate_den

    def _slide(self, arrivals: int) -> None:
        """``arrivals`` new keys on every S_i, each evicting the oldest window key."""
        if arrivals == 0:
            return
        w = self.workload.window
        # arrivals evicted by later arrivals of the same slide never reach the index
        first = max(0, arrivals - w)
        fresh = _window_keys(
            self._window_stream, self._arrivals + first, arrivals - first, self.workload.n
        )
        slots = (self._head + np.arange(first, arrivals)) % w
        for i, index in enumerate(self.indexes):
            index.delete_many(self._rings[i, slots])
            index.insert_many(fresh[i])
            self._rings[i, slots] = fresh[i]
        self._head = (self._head + arrivals) % w
        self._arrivals += arrivals

    def next_batch(self, size: int) -> tuple[Batch, np.ndarray]:
        """Slide the windows, then return the next ``size`` S_0 tuples and the truth matrix.

        The batch has int64 columns k0..k{n-1} (the key filter i probes) and ts = the tuples'
        sequence numbers; ``passes[t, i]`` is what filter i returns for tuple t when probing
        ``indexes[i]`` before the next call.
        """
        if not _is_int(size) or size < 0:
            raise ValueError(f"size must be an integer >= 0, got {size!r}")
        size = int(size)
        w = self.workload
        start = self._generated
        self._slide(self._arrivals_before(start + size) - self._arrivals_before(start))

        # selectivity segments: a permutation takes effect at every multiple of change_every
        seg_sel = [self._group_sel]
        seg_end: list[int] = []
        if w.change_every is not None:
            k = w.change_every
            first = max(1, -(-start // k)) * k
            for at in range(first, start + size, k):
                seg_end.append(at - start)
                self._group_sel = self._group_sel[self._rng.permutation(w.n_groups)]
                seg_sel.append(self._group_sel)
                self.changes.append(at)
        seg_end.append(size)
        sels = np.array(seg_sel, np.float64)
        thr_s = _thresholds(sels)
        thr_q = _thresholds(np.vectorize(copy_probability)(sels, float(w.agreement)))
        ends = np.array(seg_end, np.int64)

        keys = np.empty((w.n, size), np.int64)
        passes = np.empty((size, w.n), np.bool_)
        _fill(
            self._tuple_stream, start, self.group_of, thr_s, thr_q, ends, self._rings, keys, passes
        )
        self._generated = start + size
        columns = {name: keys[i] for i, name in enumerate(self.column_names)}
        ts = np.arange(start, start + size, dtype=np.int64)
        return Batch.inserts(columns, ts), passes
