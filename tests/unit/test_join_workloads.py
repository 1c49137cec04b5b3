"""The join workloads: Example 1's router streams and A-Caching's Section 7.1 generators.

Determinism, timestamps, and the statistics each generator promises, measured on the data."""

from __future__ import annotations

import itertools
import math

import fastavro
import numpy as np
import pytest
from helpers import within

from processors.core.batch import Batch
from processors.workloads.joins import (
    ChainJoinWorkload,
    JoinWorkloadRun,
    NWayJoinWorkload,
    integer_rates,
    join_schemas,
)
from processors.workloads.network import (
    EXAMPLE1_ROUTES,
    NetworkWorkload,
    NetworkWorkloadRun,
    OverlapPhase,
    default_phases,
    network_schemas,
)
from topics.columnar import RecordCodec

PHASE_MS = 4_000
RATE = 25_000  # packets/s: 100k packets per phase


def network_streams(workload: NetworkWorkload, span_ms: int) -> list[Batch]:
    """Every router stream of a whole run, generated ``span_ms`` at a time."""
    run = NetworkWorkloadRun(workload)
    parts: list[list[Batch]] = [[] for _ in range(workload.routers)]
    for batches in run.iter_batches(span_ms):
        for part, batch in zip(parts, batches, strict=True):
            part.append(batch)
    assert run.done and run.packets_generated == workload.total_packets
    return [Batch.concat(p) for p in parts]


@pytest.fixture(scope="module")
def network() -> tuple[NetworkWorkload, list[Batch]]:
    workload = NetworkWorkload(packets_per_s=RATE, phases=default_phases(4, PHASE_MS), seed=5)
    return workload, network_streams(workload, 700)


def columns(batches: list[Batch]) -> list[dict[str, list[int]]]:
    return [{k: v.tolist() for k, v in b.columns.items()} for b in batches]


# --- network: structure, determinism, time ------------------------------------------------


def test_network_same_seed_same_streams_other_seed_differs() -> None:
    workload = NetworkWorkload(packets_per_s=5000, phases=default_phases(4, 500), seed=1)
    a = network_streams(workload, 100)
    b = network_streams(workload, 37)  # another split of the same run
    assert columns(a) == columns(b)
    assert all(np.array_equal(x.ts, y.ts) for x, y in zip(a, b, strict=True))
    other = network_streams(
        NetworkWorkload(packets_per_s=5000, phases=default_phases(4, 500), seed=2), 100
    )
    assert not np.array_equal(a[0].columns["pid"], other[0].columns["pid"])
    assert not np.array_equal(a[0].columns["size"][:100], other[0].columns["size"][:100])


def test_network_batches_time_order_and_columns(network) -> None:
    workload, streams = network
    run = NetworkWorkloadRun(workload)
    assert run.stream_names == ["r0", "r1", "r2", "r3"]
    first = run.next_batches(300)
    assert run.now_ms == workload.start_ms + 300
    for name, batch in zip(run.stream_names, first, strict=True):
        assert batch.meta["stream"] == name
        assert list(batch.columns) == ["pid", "size", "ts"]
        assert all(c.dtype == np.int64 for c in batch.columns.values())
        assert np.array_equal(batch.columns["ts"], batch.ts) and (batch.sign == 1).all()
        assert ((batch.ts >= workload.start_ms) & (batch.ts < workload.start_ms + 300)).all()
    end = run.end_ms
    for batch in streams:
        assert (np.diff(batch.ts) >= 0).all()
        assert batch.ts[0] >= workload.start_ms and batch.ts[-1] < end
        lo, hi = workload.sizes
        assert batch.columns["size"].min() >= lo and batch.columns["size"].max() <= hi
        assert len(np.unique(batch.columns["pid"])) == len(batch)  # one sighting per router
    # every packet is seen, by as many routers as its route has
    pids = np.concatenate([b.columns["pid"] for b in streams])
    assert len(np.unique(pids)) == workload.total_packets == 4 * PHASE_MS * RATE // 1000
    # after the end: nothing more
    while not run.done:
        run.next_batches(10_000)
    assert all(len(b) == 0 for b in run.next_batches(1000))


def test_network_packets_mode_router_column_and_schemas() -> None:
    workload = NetworkWorkload(packets=1234, packets_per_s=500, include_router=True, seed=9)
    streams = network_streams(workload, 250)
    pids = np.concatenate([b.columns["pid"] for b in streams])
    assert len(np.unique(pids)) == 1234
    schemas = network_schemas(workload)
    assert list(schemas) == ["r0", "r1", "r2", "r3"]
    for i, (name, batch) in enumerate(zip(schemas, streams, strict=True)):
        assert list(batch.columns) == ["pid", "size", "ts", "router"]
        assert (batch.columns["router"] == i).all()
        schema = schemas[name]
        fastavro.parse_schema(schema)
        assert [f["name"] for f in schema["fields"]] == list(batch.columns)
        buf, offsets = RecordCodec(schema).encode_many(batch.columns, len(batch))
        assert len(offsets) == len(batch) + 1
    assert [f["name"] for f in network_schemas(NetworkWorkload())["r0"]["fields"]] == [
        "pid",
        "size",
        "ts",
    ]


def test_network_birth_times_are_exact_and_phases_repeat() -> None:
    workload = NetworkWorkload(packets_per_s=333.3, duration_ms=20_000, phases=default_phases(4))
    run = NetworkWorkloadRun(workload)
    assert workload.total_packets == math.ceil(20 * 333.3)
    births = np.asarray(run.birth_ms(np.arange(workload.total_packets)))
    assert births[0] == workload.start_ms and (np.diff(births) >= 0).all()
    assert births[-1] < workload.start_ms + 20_000
    start = workload.start_ms
    assert run.phase_at(start) == 0 and run.phase_at(start + 1_199_999) == 0
    assert run.phase_at(start + 1_200_000) == 1
    assert run.phase_at(start + 4 * 1_200_000 + 5) == 0  # the schedule repeats


# --- network: measured statistics against the phase's parameters --------------------------


def phase_rows(run: NetworkWorkloadRun, batch: Batch, phase: int) -> np.ndarray:
    """Rows of ``batch`` seen in ``phase``, away from its edges (a packet's sightings span up
    to (routers-1) * max_hop_delay_ms after its birth)."""
    margin = 3 * run.workload.max_hop_delay_ms + 1
    offset = batch.ts - run.workload.start_ms
    lo, hi = phase * PHASE_MS, (phase + 1) * PHASE_MS
    return np.flatnonzero((offset >= lo + margin) & (offset < hi - margin))


def contains(sorted_keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Which ``values`` occur in ``sorted_keys`` (np.isin without re-sorting every time)."""
    at = np.minimum(np.searchsorted(sorted_keys, values), len(sorted_keys) - 1)
    return sorted_keys[at] == values


def test_network_shares_and_overlaps_match_each_phase(network) -> None:
    workload, streams = network
    run = NetworkWorkloadRun(workload)
    keys = [np.sort(s.columns["pid"]) for s in streams]
    per_phase = PHASE_MS * RATE // 1000
    for p, phase in enumerate(workload.schedule):
        shares, overlap = phase.shares(4), phase.overlap(4)
        for i in range(4):
            rows = phase_rows(run, streams[i], p)
            full = len(np.flatnonzero((streams[i].ts - workload.start_ms) // PHASE_MS == p))
            assert within(full / per_phase, shares[i], per_phase)
            mine = streams[i].columns["pid"][rows]
            for j in range(4):
                seen = contains(keys[j], mine).mean()
                assert within(seen, overlap[i, j], len(mine)), (p, i, j, seen, overlap[i, j])


def test_network_probe_pass_rates_follow_visiting_order(network) -> None:
    """An insert into W_i passes probes F iff F's routers saw the packet earlier: measured on
    the timestamps, it matches ``pass_rate`` (the same for inserts and for deletes)."""
    workload, streams = network
    run = NetworkWorkloadRun(workload)
    order = [np.argsort(s.columns["pid"]) for s in streams]
    for p, phase in enumerate(workload.schedule[:2]):
        for i in range(4):
            rows = phase_rows(run, streams[i], p)
            pid, ts = streams[i].columns["pid"][rows], streams[i].ts[rows]
            before = {}
            for j in range(4):
                if j == i:
                    continue
                keys = streams[j].columns["pid"][order[j]]
                at = np.minimum(np.searchsorted(keys, pid), len(keys) - 1)
                hit = keys[at] == pid
                before[j] = hit & (streams[j].ts[order[j]][at] < ts)
            others = sorted(before)
            for size in (1, 2, 3):
                for probes in itertools.combinations(others, size):
                    passed = np.logical_and.reduce([before[j] for j in probes]).mean()
                    expected = phase.pass_rate(i, probes)
                    assert within(passed, expected, len(pid)), (p, i, probes, passed, expected)


def test_example1_best_orders_change_every_phase() -> None:
    workload = NetworkWorkload()
    orders = workload.best_orders()
    assert len(orders) == 4
    assert orders[0][0] == (1, 3, 2)  # Example 1: R_1 probes W_2, W_4, W_3
    for p, q in itertools.pairwise([*orders, orders[0]]):
        assert all(a != b for a, b in zip(p, q, strict=True))
    phase0 = workload.schedule[0]
    overlap = phase0.overlap(4)
    assert overlap[0, 1] < 0.15 and overlap[0, 2] > 0.8 and overlap[0, 3] > 0.7
    assert phase0.weights == pytest.approx(tuple(EXAMPLE1_ROUTES.values()))


@pytest.mark.parametrize("routers", [3, 4, 5])
def test_best_orders_are_optimal_by_brute_force(routers: int) -> None:
    rng = np.random.default_rng(routers)
    subsets = [s for k in range(1, routers + 1) for s in itertools.combinations(range(routers), k)]
    for phase in [
        *default_phases(routers),
        OverlapPhase(1, {s: float(rng.random()) for s in subsets}),
    ]:
        for i, best in enumerate(phase.best_orders(routers)):
            others = [j for j in range(routers) if j != i]
            costs = {o: phase.expected_probes(i, o) for o in itertools.permutations(others)}
            low = min(costs.values())
            assert costs[best] == pytest.approx(low, abs=1e-12)
            ties = [o for o, c in costs.items() if c <= low + 1e-12]
            assert best == min(ties)


# --- network: validation -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"routers": 1}, "routers"),
        ({"routers": 2.0}, "routers"),
        ({"packets_per_s": 0}, "packets_per_s"),
        ({"packets_per_s": float("inf")}, "packets_per_s"),
        ({"duration_ms": 0}, "duration_ms"),
        ({"packets": -1}, "packets"),
        ({"packets": 5, "duration_ms": 5}, "duration_ms or packets"),
        ({"phases": []}, "phases"),
        ({"phases": [OverlapPhase(10, {(0, 4): 1.0})]}, "phases"),
        ({"max_hop_delay_ms": 0}, "max_hop_delay_ms"),
        ({"sizes": (0, 10)}, "sizes"),
        ({"sizes": (10, 5)}, "sizes"),
        ({"start_ms": -1}, "start_ms"),
        ({"include_router": 1}, "include_router"),
        ({"seed": -3}, "seed"),
    ],
)
def test_network_workload_validation(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        NetworkWorkload(**kwargs)


def test_overlap_phase_and_run_validation() -> None:
    with pytest.raises(ValueError, match="duration_ms"):
        OverlapPhase(0, {(0, 1): 1.0})
    with pytest.raises(ValueError, match="routes"):
        OverlapPhase(10, {})
    with pytest.raises(ValueError, match="routes"):
        OverlapPhase(10, {(0, 1): 0.0})
    with pytest.raises(ValueError, match="routes"):
        OverlapPhase(10, {(0, 0): 1.0})
    with pytest.raises(ValueError, match="routes"):
        OverlapPhase(10, [((0, 1), 1.0), ((1, 0), 2.0)])
    with pytest.raises(ValueError, match="routers"):
        default_phases(1)
    with pytest.raises(ValueError, match="routers"):
        OverlapPhase(10, {(0, 1): 1.0}).best_orders(13)
    run = NetworkWorkloadRun(NetworkWorkload(packets=10))
    with pytest.raises(ValueError, match="span_ms"):
        run.next_batches(-1)
    with pytest.raises(ValueError, match="span_ms"):
        next(run.iter_batches(0))


# --- Section 7.1 joins ---------------------------------------------------------------------


def join_streams(workload, sizes: list[int]) -> tuple[JoinWorkloadRun, list[Batch]]:
    run = JoinWorkloadRun(workload)
    parts = [run.next_batches(s) for s in sizes]
    return run, [Batch.concat(list(p)) for p in zip(*parts, strict=True)]


def test_join_defaults_follow_section_7_1() -> None:
    chain = JoinWorkloadRun(ChainJoinWorkload())
    assert chain.stream_names == ["R", "S", "T"]
    assert [s.columns for s in chain.streams] == [("a",), ("a", "b"), ("b",)]
    assert [s.multiplicity for s in chain.streams] == [1.0, 1.0, 5.0]
    assert chain.rates == [1, 1, 5] and chain.window_sizes == [1000, 1000, 5000]
    seven = NWayJoinWorkload(n=7)
    assert seven.multiplicities == (1.0, 1.0, 1.0, 5.0, 5.0, 5.0, 5.0)
    run = JoinWorkloadRun(seven)
    assert run.stream_names == [f"R{i}" for i in range(1, 8)] and run.rates == [1] * 3 + [5] * 4
    assert integer_rates([0.5, 1.5, 2.0]) == [1, 3, 4]
    assert integer_rates([10, 15, 1, 5]) == [10, 15, 1, 5]


def test_join_same_seed_same_tuples_other_seed_differs() -> None:
    workload = NWayJoinWorkload(n=3, multiplicities=[0.4, 1.5, 2.25], domain=200, seed=4)
    _, a = join_streams(workload, [1000, 3, 2500, 997])
    _, b = join_streams(workload, [4500])
    assert columns(a) == columns(b)
    _, c = join_streams(NWayJoinWorkload(n=3, multiplicities=[0.4, 1.5, 2.25], domain=200), [4500])
    assert columns(a) != columns(c)
    # integer multiplicities draw nothing: the seed does not matter
    _, d = join_streams(ChainJoinWorkload(seed=1), [500])
    _, e = join_streams(ChainJoinWorkload(seed=2), [500])
    assert columns(d) == columns(e)


def test_join_timestamps_unique_and_interleaved_by_rate() -> None:
    workload = ChainJoinWorkload(multiplicities=(1, 2, 5), rates=(10, 15, 1), start_ms=1000)
    run, streams = join_streams(workload, [777, 5000, 1223])
    total = 7000
    ts = np.concatenate([b.ts for b in streams])
    assert np.array_equal(np.sort(ts), np.arange(1000, 1000 + total))  # globally unique
    assert run.tuples_generated == total and run.period == 26
    for i, batch in enumerate(streams):
        assert (np.diff(batch.ts) > 0).all()
        assert np.array_equal(batch.columns["ts"], batch.ts)
        assert all(c.dtype == np.int64 for c in batch.columns.values())
        assert abs(len(batch) - total * run.rates[i] / run.period) <= run.rates[i]
        gaps = np.diff(batch.ts)  # uniform arrivals: gaps within one slot of period/rate
        ideal = run.period / run.rates[i]
        assert gaps.min() >= math.floor(ideal) - 1 and gaps.max() <= math.ceil(ideal) + 1
        local = np.arange(len(batch))
        assert np.array_equal(run.global_index(i, local) + 1000, batch.ts)


@pytest.mark.parametrize(
    "workload",
    [
        ChainJoinWorkload(),
        ChainJoinWorkload(multiplicities=(1.0, 0.3, 2.7), domain=500, seed=3),
        NWayJoinWorkload(n=5, multiplicities=[1, 5, 0.75, 2.5, 1], rates=[1, 1, 2, 3, 7], seed=8),
    ],
)
def test_join_windows_hold_each_value_multiplicity_times(workload) -> None:
    run = JoinWorkloadRun(workload)
    fill = run.fill_tuples
    _, streams = join_streams(workload, [fill + 20_000])
    domain = workload.domain
    for i, (spec, batch) in enumerate(zip(run.streams, streams, strict=True)):
        window = run.window_sizes[i]
        assert window == round(spec.multiplicity * domain)
        assert run.multiplicities[i] == pytest.approx(spec.multiplicity, abs=0.5 / domain)
        counts = run.value_counts[i]
        assert set(np.unique(counts)) <= {
            math.floor(spec.multiplicity),
            math.ceil(spec.multiplicity),
        }
        vals = batch.columns[spec.columns[0]]
        for col in spec.columns[1:]:
            assert np.array_equal(batch.columns[col], vals)  # S.A = S.B
        for g in (fill, fill + 7_777, fill + 19_999):  # a ROWS window at global time g
            upto = np.searchsorted(batch.ts - workload.start_ms, g, side="right")
            assert upto >= window
            held = np.bincount(vals[upto - window : upto], minlength=domain)
            assert np.array_equal(held, counts)


def test_join_streams_stay_in_step_with_default_rates() -> None:
    """Rates proportional to the multiplicities keep the streams at the same domain value."""
    _, streams = join_streams(ChainJoinWorkload(domain=50), [10_000])
    cols = ["a", "a", "b"]
    ts = np.arange(100, 10_000)
    current = []
    for batch, col in zip(streams, cols, strict=True):
        at = np.searchsorted(batch.ts, ts, side="right") - 1
        current.append(batch.columns[col][at])
    for x, y in itertools.combinations(current, 2):
        diff = (x - y) % 50
        assert np.minimum(diff, 50 - diff).max() <= 1


def test_join_schemas_match_batch_columns() -> None:
    for workload in (ChainJoinWorkload(), NWayJoinWorkload(n=3)):
        run, streams = join_streams(workload, [100])
        schemas = join_schemas(workload)
        assert list(schemas) == run.stream_names
        for batch, schema in zip(streams, schemas.values(), strict=True):
            fastavro.parse_schema(schema)
            assert [f["name"] for f in schema["fields"]] == list(batch.columns)
            RecordCodec(schema).encode_many(batch.columns, len(batch))


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda: ChainJoinWorkload(multiplicities=(1, 1)), "multiplicities"),
        (lambda: ChainJoinWorkload(multiplicities=(1, 0, 5)), "multiplicities"),
        (lambda: ChainJoinWorkload(multiplicities=(1, 1, 0.0001), domain=100), "multiplicities"),
        (lambda: ChainJoinWorkload(multiplicities="115"), "multiplicities"),
        (lambda: ChainJoinWorkload(rates=(1, 1)), "rates"),
        (lambda: ChainJoinWorkload(rates=(1, -1, 1)), "rates"),
        (lambda: ChainJoinWorkload(domain=0), "domain"),
        (lambda: ChainJoinWorkload(start_ms=-1), "start_ms"),
        (lambda: ChainJoinWorkload(seed=-1), "seed"),
        (lambda: NWayJoinWorkload(n=1), "n"),
        (lambda: NWayJoinWorkload(n=3, multiplicities=[1, 1]), "multiplicities"),
        (lambda: JoinWorkloadRun(ChainJoinWorkload(rates=(1, 1.000001, 1))), "rates"),
        (lambda: JoinWorkloadRun(ChainJoinWorkload()).next_batches(-1), "count"),
    ],
)
def test_join_validation(make, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        make()
