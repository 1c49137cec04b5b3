"""The data and queries of ``streamon bench peers``, written once and read by every system.

Every system (streamon and its peers) must see the same tuples and answer the same question, so
this module is the single source of both: generators (deterministic, seeded), the files peers
read (CSV with a header: no code crosses the process boundary), the Flink SQL of each workload,
the filter specification the Python peers interpret, and the order-independent checksums that
the agreement check compares. It imports nothing of the peers.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from processors.core.batch import Batch, VarColumn, null_column
from processors.workloads.examples import SITES

MOD = 1_000_000_007
START_MS = 1_700_000_000_000
#: sensors whose readings filter F8 keeps (a 500-key membership set: a hash set in Python,
#: a sorted-array search in streamon, an IN list in Flink SQL)
SENSOR_SET = tuple(int(x) for x in np.sort(np.random.default_rng(7).permutation(1000)[:500]))

#: (field, op, constant) of the 8 conjunctive filters; ops: > < between in ==
FILTERS: tuple[tuple[str, str, Any], ...] = (
    ("temperature", ">", 10.0),
    ("temperature", "<", 35.0),
    ("humidity", "<", 80.0),
    ("humidity", ">", 20.0),
    ("sensor_id", "between", (50, 949)),
    ("site", "in", ("north", "south", "east", "lab-1")),
    ("ok", "==", True),
    ("sensor_id", "in", SENSOR_SET),
)

#: per half: (share of sensors drawn from SENSOR_SET, P(ok), mean temperature); the second
#: half turns F7 from the most selective filter into a lax one and F8 the other way round
PHASES = ((0.95, 0.35, 18.0), (0.15, 0.97, 26.0))


def filters_batch(n: int, seed: int = 5) -> Batch:
    """``n`` readings (the Reading schema) whose filter selectivities change at n // 2; the
    record's id is ``(ts - START_MS) // 10``."""
    rng = np.random.default_rng(seed)
    half = n // 2
    in_set = np.asarray(SENSOR_SET, np.int64)
    out_set = np.setdiff1d(np.arange(1000, dtype=np.int64), in_set)
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("sensor_id", "temperature", "ok")}
    for size, (share, p_ok, mean) in zip((half, n - half), PHASES, strict=True):
        pick = rng.random(size) < share
        sensors = np.where(
            pick, in_set[rng.integers(0, len(in_set), size)], out_set[rng.integers(0, 500, size)]
        )
        parts["sensor_id"].append(sensors)
        parts["temperature"].append(np.round(rng.normal(mean, 8.0, size), 3))
        parts["ok"].append(rng.random(size) < p_ok)
    site_idx = rng.integers(0, len(SITES), n)
    encoded = [s.encode() for s in SITES]
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(np.array([len(s) for s in encoded], np.int64)[site_idx], out=offsets[1:])
    data = np.frombuffer(b"".join(encoded[i] for i in site_idx.tolist()), np.uint8).copy()
    ts = START_MS + np.arange(n, dtype=np.int64) * 10
    cols: dict[str, Any] = {k: np.concatenate(v) for k, v in parts.items()}
    cols["ts"] = ts
    cols["humidity"] = rng.uniform(0, 100, n).astype(np.float32)
    cols["site"] = VarColumn(offsets, data)
    cols["battery"] = np.zeros(n, np.float32)  # the schema's nullable field: always null here
    cols[null_column("battery")] = np.ones(n, np.bool_)
    keys = cols["sensor_id"].astype(">i8").view(np.uint8)
    key = VarColumn(np.arange(0, 8 * n + 1, 8, dtype=np.int64), keys.copy(), utf8=False)
    return Batch.inserts(cols, ts=ts, key=key)


def site_codes(batch: Batch) -> np.ndarray:
    """The index in SITES of each tuple's site (for CSV writing and numpy oracles)."""
    site = batch.columns["site"]
    first = site.data[site.offsets[:-1]]
    length = np.diff(site.offsets)
    codes = np.full(len(batch), -1, np.int64)
    for i, s in enumerate(SITES):
        b = s.encode()
        codes[(first == b[0]) & (length == len(b)) & (site.data[site.offsets[:-1] + len(b) - 1]
                                                       == b[-1])] = i  # fmt: skip
    return codes


def filter_mask(batch: Batch, filters: Sequence[tuple[str, str, Any]] = FILTERS) -> np.ndarray:
    """The numpy oracle: which tuples pass every filter."""
    c = batch.columns
    mask = np.ones(len(batch), np.bool_)
    for field, op, value in filters:
        if field == "site":
            allowed = [SITES.index(v) for v in value]
            mask &= np.isin(site_codes(batch), allowed)
        elif op == "between":
            mask &= (c[field] >= value[0]) & (c[field] <= value[1])
        elif op == "in":
            mask &= np.isin(c[field], np.asarray(value))
        else:
            mask &= {">": np.greater, "<": np.less, "==": np.equal}[op](c[field], value)
    return mask


def reading_checksum(ts: np.ndarray, sensor_id: np.ndarray) -> int:
    """Order-independent checksum of result readings: sum of (ts * 31 + sensor_id) mod P."""
    return int(((np.asarray(ts, np.int64) * 31 + sensor_id) % MOD).sum())


def write_filters_csv(batch: Batch, path: Path) -> None:
    """The readings as CSV (ts, sensor_id, temperature, humidity, site, ok) for Flink."""
    c = batch.columns
    codes = site_codes(batch).tolist()
    rows = zip(c["ts"].tolist(), c["sensor_id"].tolist(), c["temperature"].tolist(),
               c["humidity"].tolist(), codes, c["ok"].tolist(), strict=True)  # fmt: skip
    with path.open("w") as f:
        f.writelines(
            f"{t},{s},{te!r},{h!r},{SITES[si]},{'true' if ok else 'false'}\n"
            for t, s, te, h, si, ok in rows
        )


def flink_filter_where(filters: Sequence[tuple[str, str, Any]] = FILTERS) -> str:
    """The filters as a Flink SQL WHERE clause."""
    parts = []
    for field, op, value in filters:
        if op == "between":
            parts.append(f"{field} BETWEEN {value[0]} AND {value[1]}")
        elif op == "in":
            vals = ", ".join(f"'{v}'" if isinstance(v, str) else str(v) for v in value)
            parts.append(f"{field} IN ({vals})")
        elif op == "==":
            parts.append(f"{field} = {str(value).upper()}")
        else:
            parts.append(f"{field} {op} {value}")
    return " AND ".join(parts)


def streamon_where(filters: Sequence[tuple[str, str, Any]] = FILTERS, stream: str = "r") -> str:
    """The filters as streamon query-builder text (for a worker's query file)."""
    parts = []
    for field, op, value in filters:
        ref = f'col("{stream}.{field}")'
        if op == "between":
            parts.append(f"{ref}.between({value[0]!r}, {value[1]!r})")
        elif op == "in":
            parts.append(f"{ref}.isin({list(value)!r})")
        else:
            parts.append(f"{ref} {op} {value!r}")
    return ", ".join(parts)


# -- joins ------------------------------------------------------------------------------------
def join3_inputs(n: int, keys: int = 2000, seed: int = 3) -> list[dict[str, np.ndarray]]:
    """Three inputs of ``n`` tuples (id, k, ts); timestamps ts = START_MS + 3 j + input are
    distinct across inputs, so with a RANGE that is a multiple of 3 no two tuples of different
    inputs are exactly one RANGE apart (no tie rule matters)."""
    rng = np.random.default_rng(seed)
    return [
        {
            "id": np.arange(n, dtype=np.int64),
            "k": rng.integers(0, keys, n).astype(np.int64),
            "ts": START_MS + np.arange(n, dtype=np.int64) * 3 + i,
        }
        for i in range(3)
    ]


def netmon_inputs(packets: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """The demo's four router streams (pid, size, ts) for ``packets`` packets."""
    from processors.workloads.network import NetworkWorkload, NetworkWorkloadRun

    run = NetworkWorkloadRun(NetworkWorkload(packets=packets, seed=seed))
    parts: list[list[Batch]] = [[] for _ in range(4)]
    for batches in run.iter_batches(60_000):
        for i, b in enumerate(batches):
            parts[i].append(b)
    return [
        {c: np.concatenate([b.columns[c] for b in bs]) for c in ("pid", "size", "ts")}
        for bs in parts
    ]


def write_columns_csv(cols: dict[str, np.ndarray], path: Path) -> None:
    """Integer columns as CSV (no header), in the dict's order."""
    np.savetxt(path, np.column_stack(list(cols.values())), fmt="%d", delimiter=",")


def join_checksum(ids: Sequence[np.ndarray]) -> int:
    """Order-independent checksum of join results: sum over rows of
    (id0 * 1000003 + id1 * 1009 + id2) mod P (ids below 2^40)."""
    h = np.asarray(ids[0], np.int64) * 1_000_003 + np.asarray(ids[1], np.int64) * 1009
    return int(((h + ids[2]) % MOD).sum())


def netmon_checksum(pid: np.ndarray, size: np.ndarray) -> int:
    """Order-independent checksum of joined sightings: sum of (pid mod P + size) mod P."""
    return int((((np.asarray(pid, np.int64) % MOD) + size) % MOD).sum())


def flink_join3_sql(range_ms: int) -> str:
    """3-way equi-join on k, every pair of tuples less than ``range_ms`` apart (event time).

    Every input is bounded against the first one on its event-time attribute ``rt``, so that
    Flink's planner makes each join an interval join (bounded state); the pairs that do not
    involve the first input are compared on the plain ``ts`` columns, a filter after the joins.
    Written with every pair on ``rt`` instead, the planner made only the first join an interval
    join and the others regular joins with unbounded state (same results, slower: 40k against
    53k records/s on 3 x 100,000 tuples)."""
    return _flink_join_sql(
        ["s0", "s1", "s2"], "k", range_ms,
        f"COUNT(*) AS n, SUM({flink_mod('s0.id * 1000003 + s1.id * 1009 + s2.id')}) AS chk",
    )  # fmt: skip


def flink_netmon_sql(range_ms: int) -> str:
    """The demo's join of four routers on pid with its sum of sizes."""
    _pid_size_mod = flink_mod(flink_mod(flink_mod("r0.pid") + f" + {MOD}") + " + r0.size")
    return _flink_join_sql(
        ["r0", "r1", "r2", "r3"], "pid", range_ms,
        f"COUNT(*) AS n, SUM({_pid_size_mod}) AS chk, SUM(r0.size) AS total_bytes",
    )  # fmt: skip


def flink_mod(expr: str) -> str:
    """``expr mod P`` in Flink SQL as a BIGINT (MOD takes its divisor's type: an INT literal
    would make the sums overflow)."""
    return f"MOD({expr}, CAST({MOD} AS BIGINT))"


def _flink_join_sql(names: list[str], key: str, range_ms: int, select: str) -> str:
    if range_ms % 60_000 == 0:  # Flink takes at most 2 leading digits of the unit
        seconds = f"INTERVAL '{range_ms // 60_000}' MINUTE"
    else:
        seconds = f"INTERVAL '{range_ms / 1000:.3f}' SECOND"
    first = names[0]
    conds = [f"{first}.{key} = {n}.{key}" for n in names[1:]]
    for b in names[1:]:  # on the time attributes: each a bounded interval join with the first
        conds.append(f"{b}.rt > {first}.rt - {seconds} AND {b}.rt < {first}.rt + {seconds}")
    for i, a in enumerate(names[1:], start=1):  # the other pairs: a filter on the BIGINT ts
        for b in names[i + 1 :]:
            conds.append(f"{b}.ts - {a}.ts < {range_ms} AND {a}.ts - {b}.ts < {range_ms}")
    return f"SELECT {select} FROM {', '.join(names)} WHERE {' AND '.join(conds)}"
