"""The network workload's unrecorded sizes (``null_sizes``), which the demo uses: a nullable
size field, nulls that do not depend on how a run is split, and a query over them that agrees
with plain-Python SQL (the sum skips null sizes, the count counts every joined sighting)."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from processors.commands.network_query import query_plan, query_text
from processors.core.batch import null_column
from processors.physical.runner import QueryRunner
from processors.workloads.network import (
    NetworkWorkload,
    NetworkWorkloadRun,
    network_schemas,
    packet_schema,
)
from topics.columnar import RecordCodec


def sightings(workload: NetworkWorkload, span_ms: int) -> list[list[tuple]]:
    run, out = NetworkWorkloadRun(workload), [[] for _ in workload.stream_names]
    while not run.done:
        for i, b in enumerate(run.next_batches(span_ms)):
            c = b.columns
            out[i] += zip(c["pid"].tolist(), c["size"].tolist(), c["size?"].tolist(),
                          c["ts"].tolist(), strict=True)  # fmt: skip
    return out


def test_null_sizes_are_deterministic_and_leave_the_rest_unchanged() -> None:
    base = NetworkWorkload(packets=4000, packets_per_s=400, seed=11)
    nulls = NetworkWorkload(packets=4000, packets_per_s=400, seed=11, null_sizes=0.3)
    assert sightings(nulls, 97) == sightings(nulls, 5000)
    plain = NetworkWorkloadRun(base).next_batches(10**9)
    with_nulls = NetworkWorkloadRun(nulls).next_batches(10**9)
    assert list(plain[0].columns) == ["pid", "size", "ts"]
    assert list(with_nulls[0].columns) == ["pid", "size", "size?", "ts"]
    flags = np.concatenate([b.columns["size?"] for b in with_nulls])
    assert 0.27 < flags.mean() < 0.33
    for a, b in zip(plain, with_nulls, strict=True):
        assert np.array_equal(a.columns["pid"], b.columns["pid"])
        assert np.array_equal(a.columns["ts"], b.columns["ts"])
        null = b.columns["size?"]
        assert np.array_equal(a.columns["size"][~null], b.columns["size"][~null])
        assert not b.columns["size"][null].any()
    assert network_schemas(base)["r0"] == packet_schema()
    size = network_schemas(nulls)["r0"]["fields"][1]
    assert size["type"] == ["null", "long"] and size["default"] is None


def test_null_sizes_round_trip_through_the_codec() -> None:
    workload = NetworkWorkload(packets=500, packets_per_s=100, seed=2, null_sizes=0.4)
    batch = NetworkWorkloadRun(workload).next_batches(10**9)[0]
    codec = RecordCodec(network_schemas(workload)["r0"])
    result = codec.decode_many(*codec.encode_many(batch.columns, len(batch)))
    assert result.errors == []
    for name in ("pid", "size", null_column("size"), "ts"):
        assert np.array_equal(result.columns[name], batch.columns[name]), name


@pytest.mark.parametrize("seed", [1, 4])
def test_the_demo_query_sums_only_recorded_sizes(seed: int) -> None:
    window = 60_000
    workload = NetworkWorkload(packets_per_s=5.0, duration_ms=400_000, seed=seed, null_sizes=0.3)
    text = query_text("q", "p", "p.out", partitions=1, window_ms=window, nullable_size=True)
    runner = QueryRunner(query_plan(text), 0)
    batches = NetworkWorkloadRun(workload).next_batches(10**9)
    for name, batch in zip(workload.stream_names, batches, strict=True):
        runner.push(name, batch)
    # released: every delta older than the slowest input's last time; the windows then hold
    # the sightings with ts in (release - window, release] of each router
    release = min(int(b.ts[-1]) for b in batches)
    live: list[dict[int, tuple[int | None, int]]] = []
    for b in batches:
        c = b.columns
        rows = zip(c["pid"].tolist(), c["size"].tolist(), c["size?"].tolist(), c["ts"].tolist(),
                   strict=True)  # fmt: skip
        live.append({p: (None if z else s, t) for p, s, z, t in rows
                     if release - window <= t < release})  # fmt: skip
    by_pid: dict[int, list] = defaultdict(list)
    for pid, (size, _) in live[0].items():
        if all(pid in other for other in live[1:]):
            by_pid[pid].append(size)
    sizes = [s for group in by_pid.values() for s in group]
    assert None in sizes and any(s is not None for s in sizes)
    (values,) = runner.stage("aggregate").current().values()
    assert values == {
        "total_bytes": sum(s for s in sizes if s is not None),
        "packets": len(sizes),
        "sized": sum(s is not None for s in sizes),
    }
