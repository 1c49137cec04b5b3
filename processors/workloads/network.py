"""The network-monitoring workload of Babu et al., Example 1 (Section 1).

Routers r0..r{n-1} (Example 1's R_1..R_4 are routers 0..3) each feed a stream of the packets they
see: (pid, size, ts). The query joins the streams on pid over 10-minute windows and sums the
sizes; each router's window deltas go through a pipeline of probes into the other routers'
windows (Figure 1). How much traffic the routers share decides the best probe order, so the
workload lets the sharing change over time.

Traffic. Packets are born at a uniform rate: packet k at ``start_ms + floor(k * 1000 /
packets_per_s)``, exactly. An :class:`OverlapPhase` is a set of routes with weights, a route
being the set of routers a packet passes; a packet born in the phase takes a route with
probability proportional to its weight and passes its routers in a uniformly random order (the
many paths through the same routers), the first one when it is born and each later one
1..``max_hop_delay_ms`` ms after the previous one, so one packet's sightings never tie. Every
sighting carries the packet's pid and size. The schedule of phases repeats until the run ends.

What a join measures. :meth:`OverlapPhase.overlap` is the fraction of router i's packets that
router j sees too. A probe also depends on timing: an insert into W_i finds the pid in the
windows of a set F of routers iff they all saw the packet before i, a delete iff all after it
(windows of equal length, far longer than the hop delays); with a random order each has
probability 1/(|F|+1) given that they all see the packet. :meth:`OverlapPhase.pass_rate` is that
probability over router i's deltas, and :meth:`OverlapPhase.best_orders` the probe orders of
least cost (Section 3, eq. 1, with unit probe costs: the expected probes per delta), which an
adaptive orderer should find in each phase.

Randomness: a Generator(PCG64(seed)) draws two 64-bit keys; packet k's route, size, visiting
order and hop delays are SplitMix64 words at counters k*(routers+2)+w under the first, and its
pid is the SplitMix64 mix of k xor the second: a bijection, so distinct packets never share a
pid. With ``null_sizes`` > 0 a router leaves a sighting's size unrecorded (null: the ``size``
field is ``["null", "long"]`` and the batches carry the companion column ``size?``) when the
SplitMix64 mix of (pid, router) under a third key falls below that fraction. Nothing depends on
how a run is split into calls.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numba import njit

from processors.core.batch import Batch, null_column
from processors.kernels.splitmix import GAMMA, mix64
from processors.workloads.network_phases import (
    EXAMPLE1_ROUTES,
    MAX_ORDER_ROUTERS,
    MAX_ROUTERS,
    OverlapPhase,
    Route,
    default_phases,
    is_int,
    is_real,
)

__all__ = [
    "EXAMPLE1_ROUTES",
    "MAX_ORDER_ROUTERS",
    "MAX_ROUTERS",
    "NetworkWorkload",
    "NetworkWorkloadRun",
    "OverlapPhase",
    "Route",
    "default_phases",
    "network_schemas",
    "packet_schema",
]

_U1 = np.uint64(1)
_S11 = np.uint64(11)
_S32 = np.uint64(32)
_LO32 = np.uint64(0xFFFFFFFF)
_CHUNK = 1 << 18  # packets generated at a time, to bound the temporary arrays


@dataclass(frozen=True)
class NetworkWorkload:
    """Parameters of the Example 1 workload.

    The run covers the packets born in ``duration_ms`` (or the first ``packets`` packets; by
    default one pass through the schedule) plus their last sightings. ``phases`` defaults to
    :func:`default_phases`; it repeats if the run is longer. Sizes are uniform in ``sizes``
    (bytes, inclusive). ``include_router`` adds a ``router`` column holding the router index.
    ``null_sizes`` is the fraction of sightings whose size is null (unrecorded); above 0 the
    size field is nullable.
    """

    routers: int = 4
    packets_per_s: float = 1000.0
    duration_ms: int | None = None
    packets: int | None = None
    phases: Sequence[OverlapPhase] | None = None
    max_hop_delay_ms: int = 5
    sizes: tuple[int, int] = (40, 1500)
    start_ms: int = 1_700_000_000_000
    include_router: bool = False
    seed: int = 0
    null_sizes: float = 0.0

    def __post_init__(self) -> None:
        if not is_int(self.routers) or not 2 <= self.routers <= MAX_ROUTERS:
            raise ValueError(
                f"routers must be an integer in 2..{MAX_ROUTERS}, got {self.routers!r}"
            )
        if not is_real(self.packets_per_s) or self.packets_per_s <= 0:
            raise ValueError(
                f"packets_per_s must be a finite number > 0, got {self.packets_per_s!r}"
            )
        if self.duration_ms is not None and (not is_int(self.duration_ms) or self.duration_ms < 1):
            raise ValueError(
                f"duration_ms must be None or an integer >= 1, got {self.duration_ms!r}"
            )
        if self.packets is not None and (not is_int(self.packets) or self.packets < 0):
            raise ValueError(f"packets must be None or an integer >= 0, got {self.packets!r}")
        if self.duration_ms is not None and self.packets is not None:
            raise ValueError("give duration_ms or packets, not both")
        phases = default_phases(self.routers) if self.phases is None else tuple(self.phases)
        if not phases or not all(isinstance(p, OverlapPhase) for p in phases):
            raise ValueError("phases must be a non-empty sequence of OverlapPhase")
        for i, p in enumerate(phases):
            if p.max_router >= self.routers:
                raise ValueError(
                    f"phases[{i}] has a route through router {p.max_router}, "
                    f"but routers={self.routers}"
                )
        object.__setattr__(self, "phases", phases)
        if not is_int(self.max_hop_delay_ms) or not 1 <= self.max_hop_delay_ms <= 60_000:
            raise ValueError(
                f"max_hop_delay_ms must be an integer in 1..60000, got {self.max_hop_delay_ms!r}"
            )
        lo_hi = tuple(self.sizes) if isinstance(self.sizes, Sequence) else ()
        if len(lo_hi) != 2 or not all(is_int(s) for s in lo_hi) or not 1 <= lo_hi[0] <= lo_hi[1]:
            raise ValueError(
                f"sizes must be (lo, hi) integers with 1 <= lo <= hi, got {self.sizes!r}"
            )
        object.__setattr__(self, "sizes", (int(lo_hi[0]), int(lo_hi[1])))
        if not is_int(self.start_ms) or self.start_ms < 0:
            raise ValueError(f"start_ms must be an integer >= 0, got {self.start_ms!r}")
        if not isinstance(self.include_router, bool):
            raise ValueError(f"include_router must be a bool, got {self.include_router!r}")
        if not is_int(self.seed) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")
        if not is_real(self.null_sizes) or not 0.0 <= self.null_sizes < 1.0:
            raise ValueError(f"null_sizes must be a number in [0, 1), got {self.null_sizes!r}")
        if self.total_packets * 1000 * self._rate.denominator >= 2**62:
            raise ValueError("packets_per_s and the run length give birth times beyond int64")

    @property
    def schedule(self) -> tuple[OverlapPhase, ...]:
        return self.phases  # type: ignore[return-value]

    @property
    def cycle_ms(self) -> int:
        """Length of one pass through the schedule."""
        return sum(p.duration_ms for p in self.schedule)

    @property
    def _rate(self) -> Fraction:
        return Fraction(repr(float(self.packets_per_s)))

    @property
    def total_packets(self) -> int:
        """Packets in the run: those born in ``duration_ms`` (default: ``cycle_ms``)."""
        if self.packets is not None:
            return int(self.packets)
        span = self.cycle_ms if self.duration_ms is None else int(self.duration_ms)
        rate = self._rate
        return -(-span * rate.numerator // (1000 * rate.denominator))

    @property
    def stream_names(self) -> list[str]:
        return [f"r{i}" for i in range(self.routers)]

    def best_orders(self) -> list[tuple[tuple[int, ...], ...]]:
        """``[phase][router]``: the probe order an adaptive orderer should converge to in each
        phase (see :meth:`OverlapPhase.best_orders`)."""
        return [p.best_orders(self.routers) for p in self.schedule]


def packet_schema(include_router: bool = False, nullable_size: bool = False) -> dict:
    """The Avro record of one router's stream: fields in the order of the batch columns.
    ``nullable_size``: the size is ``["null", "long"]`` (null where the router did not record
    it)."""
    size: dict = {"name": "size", "type": "long", "doc": "Bytes."}
    if nullable_size:
        size = {"name": "size", "type": ["null", "long"], "default": None,
                "doc": "Bytes; null where the router did not record the size."}  # fmt: skip
    fields: list[dict] = [
        {"name": "pid", "type": "long", "doc": "Packet id, the same at every router."},
        size,
        {"name": "ts", "type": "long", "doc": "Time the router saw the packet, ms."},
    ]
    if include_router:
        fields.append({"name": "router", "type": "int", "doc": "Router index."})
    return {
        "type": "record",
        "name": "RouterPacket",
        "namespace": "streamon.workloads",
        "doc": "A packet seen by one router (network-monitoring workload, Example 1).",
        "fields": fields,
    }


def network_schemas(workload: NetworkWorkload) -> dict[str, dict]:
    """Stream name -> Avro schema for every router stream of ``workload``."""
    schema = packet_schema(workload.include_router, workload.null_sizes > 0)
    return {name: schema for name in workload.stream_names}


@njit(cache=True)
def _words(stream: np.uint64, first: int, count: int) -> np.ndarray:
    """SplitMix64 words first..first+count-1 of ``stream`` (any word computed directly)."""
    out = np.empty(count, np.uint64)
    for i in range(count):
        out[i] = mix64(stream + (np.uint64(first + i) + _U1) * GAMMA)
    return out


@njit(cache=True)
def _unrecorded(key: np.uint64, pid: np.ndarray, router: np.ndarray, fraction: float) -> np.ndarray:
    """Whether router ``router[i]`` left the size of its sighting of ``pid[i]`` unrecorded."""
    out = np.empty(len(pid), np.bool_)
    for i in range(len(pid)):
        z = mix64(key ^ np.uint64(pid[i]) ^ (np.uint64(router[i]) + _U1) * GAMMA)
        out[i] = np.float64(z >> _S11) * 2.0**-53 < fraction
    return out


@njit(cache=True)
def _pids(key: np.uint64, first: int, count: int) -> np.ndarray:
    """Pids of packets first..first+count-1: a bijection of the packet number."""
    out = np.empty(count, np.int64)
    for i in range(count):
        out[i] = np.int64(mix64(key ^ np.uint64(first + i)))
    return out


class NetworkWorkloadRun:
    """A running :class:`NetworkWorkload`: the router streams, in event-time slices."""

    def __init__(self, workload: NetworkWorkload) -> None:
        self.workload = w = workload
        rng = np.random.Generator(np.random.PCG64(w.seed))
        self._stream, self._pid_key = (np.uint64(x) for x in rng.bit_generator.random_raw(2))
        self._null_key = np.uint64(rng.bit_generator.random_raw())  # drawn after: same pids
        rate = w._rate
        self._num, self._step = rate.numerator, 1000 * rate.denominator
        self.stream_names: list[str] = w.stream_names
        phases = w.schedule
        self._width = max(p.max_route_len for p in phases)  # routers a packet passes, at most
        routes = [r for p in phases for r in p.routes]  # type: ignore[union-attr]
        self._members = np.full((len(routes), self._width), -1, np.int64)
        for i, r in enumerate(routes):
            self._members[i, : len(r)] = r
        self._route_len = np.array([len(r) for r in routes], np.int64)
        self._route_base = np.cumsum([0] + [len(p.routes) for p in phases])[:-1]
        self._cum_weights = []
        for p in phases:
            cum = np.cumsum(np.array(p.weights, np.float64))
            cum[-1] = 1.0
            self._cum_weights.append(cum)
        self._phase_ends = np.cumsum([p.duration_ms for p in phases]).astype(np.int64)
        self._packets = w.total_packets
        self._next_packet = 0
        self.now_ms: int = w.start_ms
        last_birth = self.birth_ms(self._packets - 1) if self._packets else w.start_ms - 1
        self.end_ms: int = int(last_birth) + (self._width - 1) * w.max_hop_delay_ms + 1
        self.end_ms = max(self.end_ms, w.start_ms)
        self._pending = tuple(np.zeros(0, np.int64) for _ in range(5))

    @property
    def done(self) -> bool:
        """Whether every sighting has been returned."""
        return self.now_ms >= self.end_ms

    @property
    def packets_generated(self) -> int:
        return self._next_packet

    def birth_ms(self, k: int | np.ndarray) -> int | np.ndarray:
        """Birth time of packet number ``k``."""
        return self.workload.start_ms + np.asarray(k, np.int64) * self._step // self._num

    def phase_at(self, ts: int | np.ndarray) -> int | np.ndarray:
        """Index in the schedule of the phase of packets born at ``ts``."""
        offset = (np.asarray(ts, np.int64) - self.workload.start_ms) % self._phase_ends[-1]
        return np.searchsorted(self._phase_ends, offset, side="right")

    def _sightings(self, first: int, stop: int) -> tuple[np.ndarray, ...]:
        """(router, ts, packet, pid, size) of every sighting of packets first..stop-1."""
        w = self.workload
        n, width = stop - first, self._width
        packet = np.arange(first, stop, dtype=np.int64)
        birth = np.asarray(self.birth_ms(packet))
        per = w.routers + 2  # words per packet: route, size, then one per router on the route
        words = _words(self._stream, first * per, n * per).reshape(n, per)
        u = (words[:, 0] >> _S11).astype(np.float64) * 2.0**-53
        phase = np.asarray(self.phase_at(birth))
        route = np.empty(n, np.int64)
        for p, cum in enumerate(self._cum_weights):
            here = phase == p
            route[here] = self._route_base[p] + np.searchsorted(cum, u[here], side="right")
        lo, hi = w.sizes
        size = lo + (((words[:, 1] >> _S32) * np.uint64(hi - lo + 1)) >> _S32).astype(np.int64)
        # visiting order: sort the route's members by a random key (padding sorts last)
        hops = words[:, 2 : 2 + width]
        members = self._members[route]
        keys = np.where(members >= 0, hops >> _S32, np.uint64(1) << _S32)
        visit = np.take_along_axis(members, np.argsort(keys, axis=1, kind="stable"), axis=1)
        delay = 1 + (((hops[:, 1:] & _LO32) * np.uint64(w.max_hop_delay_ms)) >> _S32)
        ts = np.empty((n, width), np.int64)
        ts[:, 0] = birth
        ts[:, 1:] = birth[:, None] + np.cumsum(delay.astype(np.int64), axis=1)
        count = self._route_len[route]
        valid = np.arange(width) < count[:, None]
        pid = _pids(self._pid_key, first, n)
        return (
            visit[valid],
            ts[valid],
            np.repeat(packet, count),
            np.repeat(pid, count),
            np.repeat(size, count),
        )

    def next_batches(self, span_ms: int) -> list[Batch]:
        """The sightings with ts in [now_ms, now_ms + span_ms) (capped at ``end_ms``), one insert
        batch per router in ``stream_names`` order, each in (ts, packet) order; then advance
        ``now_ms``. Columns: pid, size (0 where null), ``size?`` with ``null_sizes``, ts (= the
        batch's ts), and router if asked for."""
        if not is_int(span_ms) or span_ms < 0:
            raise ValueError(f"span_ms must be an integer >= 0, got {span_ms!r}")
        w = self.workload
        hi = min(self.now_ms + int(span_ms), self.end_ms)
        parts = [self._pending]
        if hi > self.now_ms:
            # packets born before hi: k * step // num < hi - start
            stop = min(self._packets, -(-(hi - w.start_ms) * self._num // self._step))
            for first in range(self._next_packet, stop, _CHUNK):
                parts.append(self._sightings(first, min(first + _CHUNK, stop)))
            self._next_packet = max(self._next_packet, stop)
            self.now_ms = hi
        router, ts, packet, pid, size = (np.concatenate(c) for c in zip(*parts, strict=True))
        out = ts < hi
        self._pending = tuple(c[~out] for c in (router, ts, packet, pid, size))
        router, ts, packet, pid, size = (c[out] for c in (router, ts, packet, pid, size))
        order = np.lexsort((packet, ts, router))
        router, ts, pid, size = router[order], ts[order], pid[order], size[order]
        bounds = np.searchsorted(router, np.arange(w.routers + 1))
        batches = []
        for i, name in enumerate(self.stream_names):
            sl = slice(bounds[i], bounds[i + 1])
            cols = {"pid": pid[sl], "size": size[sl]}
            if w.null_sizes > 0:
                null = _unrecorded(self._null_key, pid[sl], router[sl], float(w.null_sizes))
                cols["size"] = np.where(null, 0, size[sl])
                cols[null_column("size")] = null
            cols["ts"] = ts[sl]
            if w.include_router:
                cols["router"] = router[sl]
            batch = Batch.inserts(cols, ts[sl])
            batch.meta["stream"] = name
            batches.append(batch)
        return batches

    def iter_batches(self, span_ms: int) -> Iterator[list[Batch]]:
        """``next_batches(span_ms)`` until the run is done."""
        if not is_int(span_ms) or span_ms < 1:
            raise ValueError(f"span_ms must be an integer >= 1, got {span_ms!r}")
        while not self.done:
            yield self.next_batches(span_ms)
