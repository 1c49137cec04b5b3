"""A 3-way join run as a binary join tree and as an MJoin on the real broker (issue 17, item 2).

Three keyed packet streams, joined on pid over RANGE windows, written as CQL. Three real workers
run side by side on the same input topics: the query as an MJoin, the same query with
``join_tree = '(a, c), b'`` (the tree of Example 1's plan (c): a Cartesian product of a and c
under the join with b), and that tree with a GROUP BY. Every signed result record of the
tree equals the MJoin's, and both equal the naive oracle's (each window delta, in event-time
order, meeting the other two windows); the GROUP BY's final groups are the oracle's.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from helpers import signed_result_rows
from integration.test_routing_broker import RANGE_MS, packets, produce, stored, window_deltas

from processors.commands.launcher import WorkerProcess, wait_for_count
from processors.commands.queries import load_plan
from topics.admin import ensure_topics
from topics.specs import TopicSpec

CATALOG = "\n".join(
    f"CREATE STREAM {s} WITH (schema = 'packet', topic = '{{{s}}}', key = 'pid', "
    "timestamp = 'ts', partitions = 2);"
    for s in ("p1", "p2", "p3")
)
FROM = f"""FROM p1 [RANGE {RANGE_MS} MS] AS a, p2 [RANGE {RANGE_MS} MS] AS b,
     p3 [RANGE {RANGE_MS} MS] AS c
WHERE a.pid = b.pid AND b.pid = c.pid"""
HEAD = "CREATE QUERY \"{name}\" INTO '{result}' PARTITIONS 2 {settings} AS\n"
JOIN = HEAD + f"SELECT a.dst AS a_dst, b.dst AS b_dst, c.dst AS c_dst\n{FROM};\n"
GROUPS = HEAD + f"SELECT a.src, count(*) AS n, sum(c.size) AS total\n{FROM}\nGROUP BY a.src;\n"
TREE = "WITH (join_tree = '(a, c), b', idle_timeout_ms = 1500)"
MJOIN = "WITH (idle_timeout_ms = 1500)"


def oracle_join3(inputs: list[list[tuple[int, int, dict]]]) -> Counter:
    """(sign, (a row, b row, c row)) -> count: every window delta in the order (ts, input,
    deletes first) joined with the other two windows on pid."""
    events = [
        (ts, i, 0 if sign < 0 else 1, sign, row)
        for i, records in enumerate(inputs)
        for ts, sign, row in window_deltas(records)
    ]
    events.sort(key=lambda e: e[:3])
    windows: list[dict[int, Counter]] = [{}, {}, {}]
    out: Counter = Counter()
    for _, i, _, sign, row in events:
        key = row["dst"]  # unique per record of a stream
        own = windows[i].setdefault(row["pid"], Counter())
        if sign < 0:
            own[key] -= 1
        j, k = (x for x in range(3) if x != i)
        for kj, nj in windows[j].get(row["pid"], Counter()).items():
            for kk, nk in windows[k].get(row["pid"], Counter()).items():
                combo = {i: key, j: kj, k: kk}
                out[(sign, combo[0], combo[1], combo[2])] += nj * nk
        if sign > 0:
            own[key] += 1
    return +Counter({e: n for e, n in out.items() if n})


def test_a_join_tree_and_the_mjoin_give_the_same_results_as_the_oracle(
    bootstrap: str, tmp_path: Path, topic_name: str
) -> None:
    topics = {s: f"{topic_name}.{s}" for s in ("p1", "p2", "p3")}
    ensure_topics(bootstrap, [TopicSpec(t, 2) for t in topics.values()])
    for seed, topic in enumerate(topics.values(), 1):
        produce(bootstrap, topic, packets(seed, 1_200, 80), None, keyed=True)
    inputs = [stored(bootstrap, t) for t in topics.values()]
    want = oracle_join3(inputs)
    assert sum(want.values()) > 2_000 and any(sign < 0 for sign, *_ in want)
    src = {r["dst"]: r["src"] for _, _, r in inputs[0]}
    size = {r["dst"]: r["size"] for _, _, r in inputs[2]}
    net: Counter = Counter()
    for (sign, a, _, c), count in want.items():
        net[src[a]] += sign * count
        net[("total", src[a])] += sign * count * size[c]
    want_groups = {(s, net[s], net[("total", s)]) for s in set(src.values()) if net[s]}

    catalog = tmp_path / "packets.cql"
    catalog.write_text(CATALOG.format(**topics))
    runs = {
        "mjoin": (JOIN, MJOIN), "tree": (JOIN, TREE), "groups": (GROUPS, TREE),
    }  # fmt: skip
    files, workers, results = {}, [], {}
    for name, (text, settings) in runs.items():
        results[name] = f"{topic_name}.{name}"
        files[name] = tmp_path / f"{name}.cql"
        files[name].write_text(text.format(name=f"{topic_name}-{name}", result=results[name],
                                           settings=settings))  # fmt: skip
        workers.append(WorkerProcess(files[name], bootstrap=bootstrap,
                                     state_dir=tmp_path / f"state-{name}", worker_id=name,
                                     extra_args=["--catalog", str(catalog)]))  # fmt: skip
    try:
        for name, worker in zip(runs, workers, strict=True):
            expected = sum(want.values()) if name != "groups" else len(want_groups)
            wait_for_count(bootstrap, results[name], expected, 150.0, [worker])
        settled = -1
        while (
            seen := wait_for_count(bootstrap, results["groups"], 10**12, 4.0, workers)
        ) != settled:
            settled = seen  # no new group change for 4 s: past the idle timeout
    finally:
        codes = [w.stop() for w in workers]
    assert codes == [0, 0, 0], "\n".join(w.log_tail(40) for w in workers)
    plans = {name: load_plan(str(path), str(catalog)) for name, path in files.items()}
    assert plans["tree"].join_tree is not None and plans["mjoin"].join_tree is None
    dsts = ("a_dst", "b_dst", "c_dst")
    tree = signed_result_rows(bootstrap, results["tree"], plans["tree"].output_schema, dsts)
    mjoin = signed_result_rows(bootstrap, results["mjoin"], plans["mjoin"].output_schema, dsts)
    assert tree == mjoin, (sum((tree - mjoin).values()), sum((mjoin - tree).values()))
    assert tree == want, (sum((tree - want).values()), sum((want - tree).values()))
    groups = signed_result_rows(bootstrap, results["groups"], plans["groups"].output_schema,
                         ("src", "n", "total"))  # fmt: skip
    final: Counter = Counter()
    for (sign, *row), count in groups.items():
        final[tuple(row)] += sign * count
    assert {k for k, v in final.items() if v} == want_groups
    assert all(v in (0, 1) for v in final.values())
