"""The Quix Streams join program of ``streamon bench peers`` (peer_programs/quix_joins.py): its
merge, result filter and checksum terms give the RANGE join's result set and checksum, when
records are seen in timestamp order and each looks up the other side's stored records of its key
in [t - bound, t] (Quix's interval-join rule, modelled here in plain Python). Also the streamon
worker's side of those workloads (its CQL and the answer of its result rows). Needs no peer."""

from __future__ import annotations

import importlib
import sys
from collections import defaultdict
from itertools import product
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from processors.bench import peers_data as D
from processors.bench.peers import agreement, json_keys
from processors.bench.peers_kafka_joins import as_packets, join_query, result_answer
from processors.bench.peers_quix import quix_spec
from processors.bench.peers_venv import PROGRAMS


@pytest.fixture(scope="module")
def qj() -> ModuleType:
    sys.path.insert(0, str(PROGRAMS))
    try:
        return importlib.import_module("quix_joins")
    finally:
        sys.path.remove(str(PROGRAMS))


def _interval_chain(qj: ModuleType, inputs: list[dict[str, np.ndarray]], key: str, rng: int,
                    kind: str) -> list[dict[str, Any]]:  # fmt: skip
    """Quix's chain of interval joins (bounds rng - 1 both ways) over the inputs in timestamp
    order, then the program's exact filter; the joined records."""
    extra = None if kind == "join3" else "size"
    idf = "id" if kind == "join3" else "pid"
    events = sorted((int(c["ts"][j]), i, j) for i, c in enumerate(inputs)
                    for j in range(len(c["ts"])))  # fmt: skip
    # store[level][side][key] = [(ts, value)]; level l joins (chain of 0..l) with input l+1
    stores: list[list[dict[int, list]]] = [[defaultdict(list), defaultdict(list)]
                                           for _ in inputs[1:]]  # fmt: skip
    out: list[dict[str, Any]] = []

    def feed(level: int, side: int, k: int, t: int, v: dict[str, Any]) -> None:
        if level == len(stores):
            out.append(v)
            return
        stores[level][side][k].append((t, v))
        for t2, other in stores[level][1 - side][k]:
            if t - (rng - 1) <= t2 <= t:
                pair = (v, other) if side == 0 else (other, v)
                feed(level + 1, 0, k, t, qj.merge(*pair))

    for t, i, j in events:
        rec = {c: int(inputs[i][c][j]) for c in inputs[i]}
        v = qj.tag_input(i, idf, extra)(rec)
        if i == 0:
            feed(0, 0, rec[key], t, v)
        else:
            feed(i - 1, 1, rec[key], t, v)
    return [v for v in out if v["hi"] - v["lo"] < rng]


def _brute(inputs: list[dict[str, np.ndarray]], key: str, rng: int) -> list[tuple[int, ...]]:
    rows = [list(zip(*(c[f].tolist() for f in c), strict=True)) for c in inputs]
    names = list(inputs[0])
    ki, ti = names.index(key), names.index("ts")
    out = []
    for combo in product(*rows):
        ts = [r[ti] for r in combo]
        if len({r[ki] for r in combo}) == 1 and max(ts) - min(ts) < rng:
            out.append(combo)
    return out


def test_join3_chain_matches_the_range_join(qj: ModuleType) -> None:
    inputs = D.join3_inputs(60, keys=4, seed=1)
    rng = 30  # a multiple of 3: no tie at the bound, as in the bench
    got = _interval_chain(qj, inputs, "k", rng, "join3")
    want = _brute(inputs, "k", rng)
    assert len(got) == len(want) > 10
    ids = [np.array([r[0] for r in (c[i] for c in want)]) for i in range(3)]
    assert sum(qj.result_hash("join3", v) for v in got) % D.MOD == D.join_checksum(ids) % D.MOD


def test_chain_keeps_ties_and_drops_the_bound(qj: ModuleType) -> None:
    """Equal timestamps join (each pair found once); exactly RANGE apart does not."""
    rng = 10
    inputs = [
        {"id": np.array([0, 1]), "k": np.array([1, 1]), "ts": np.array([100, 110])},
        {"id": np.array([0]), "k": np.array([1]), "ts": np.array([100])},
        {"id": np.array([0, 1]), "k": np.array([1, 1]), "ts": np.array([105, 109])},
    ]
    got = _interval_chain(qj, inputs, "k", rng, "join3")
    assert sorted((v["i0"], v["i1"], v["i2"]) for v in got) == [(0, 0, 0), (0, 0, 1)]
    assert len(got) == len(_brute(inputs, "k", rng))


def test_netmon_chain_and_checksum(qj: ModuleType) -> None:
    rng = 50
    g = np.random.default_rng(4)
    inputs = [{"pid": g.integers(-3, 3, 25), "size": g.integers(40, 1500, 25),
               "ts": np.sort(g.integers(0, 200, 25)) * 2 + i % 2} for i in range(4)]  # fmt: skip
    got = _interval_chain(qj, inputs, "pid", rng, "netmon")
    want = _brute(inputs, "pid", rng)
    assert len(got) == len(want) > 0
    pid = np.array([c[0][0] for c in want])
    size = np.array([c[0][1] for c in want])
    assert (
        sum(qj.result_hash("netmon", v) for v in got) % D.MOD
        == D.netmon_checksum(pid, size) % D.MOD
    )
    assert sum(v["x"] for v in got) == int(size.sum())


def test_quix_spec_copartitions_on_the_join_key(tmp_path) -> None:
    tables = [{"name": f"s{i}", "path": f"/x/s{i}.csv",
               "columns": [["id", "BIGINT"], ["k", "BIGINT"], ["ts", "BIGINT"]]}
              for i in range(3)]  # fmt: skip
    spec = quix_spec("join3", tables, "127.0.0.1:9092", 3000, 30, tmp_path)
    assert [s["key"] for s in spec["inputs"]] == ["k"] * 3
    assert len({s["topic"] for s in spec["inputs"]}) == 3
    assert spec["inputs"][0]["columns"] == ["id", "k", "ts"]


def test_json_keys_flag_a_peer_on_the_broker() -> None:
    def ran(rate: float) -> dict:
        return {"count": 1, "checksum": 1, "rate": rate, "rate_per_core": rate,
                "peak_rss_mb": 1.0, "startup_s": 1.0}  # fmt: skip

    systems = {"streamon": ran(600.0), "flink": ran(100.0), "quix": ran(200.0),
               "streamon_broker": ran(1000.0)}  # fmt: skip
    keys = json_keys("join3", systems, agreement(systems), on_broker=("quix",))
    assert keys["join3_quix_rate"] == 200.0
    assert keys["join3_quix_on_broker"] is True
    assert keys["join3_streamon_broker_rate"] == 1000.0  # streamon's, never a peer
    assert keys["join3_streamon_vs_best_peer"] == 3.0  # the best peer, wherever it ran
    assert keys["join3_streamon_vs_best_inprocess_peer"] == 6.0
    assert keys["join3_streamon_vs_best_kafka_peer"] == 5.0  # worker against Quix
    systems["quix"] = {"error": "x"}
    keys = json_keys("join3", systems, agreement(systems), on_broker=("quix",))
    assert keys["join3_streamon_vs_best_peer"] == keys["join3_streamon_vs_best_inprocess_peer"]
    assert keys["join3_streamon_vs_best_kafka_peer"] is None


def test_worker_query_and_answer() -> None:
    text = join_query("join3", "p", "p.out", 3000)
    assert text.count("CREATE STREAM") == 3
    assert "r0 [RANGE 3000 MS], r1 [RANGE 3000 MS], r2 [RANGE 3000 MS]" in text
    assert "r0.size AS id0, r1.size AS id1, r2.size AS id2" in text
    assert "r0.pid = r1.pid AND r0.pid = r2.pid" in text
    assert join_query("netmon", "p", "p.out", 600_000).count("CREATE STREAM") == 4
    rows = [{"id0": 1, "id1": 2, "id2": 3}, {"id0": 4, "id1": 5, "id2": 6}]
    ids = [np.array([1, 4]), np.array([2, 5]), np.array([3, 6])]
    assert result_answer("join3", rows) == (2, D.join_checksum(ids) % D.MOD, 0)
    rows = [{"pid": -7, "size": 100}, {"pid": 9, "size": 50}]
    want = D.netmon_checksum(np.array([-7, 9]), np.array([100, 50])) % D.MOD
    assert result_answer("netmon", rows) == (2, want, 150)
    batch = as_packets("join3", {"id": np.array([0, 1]), "k": np.array([7, 8]),
                                 "ts": np.array([10, 13])})  # fmt: skip
    assert batch.columns["pid"].tolist() == [7, 8] and batch.columns["size"].tolist() == [0, 1]
    assert batch.key is not None and len(batch.key) == 2
