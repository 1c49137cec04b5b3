"""A join whose one input stops keeps giving results (issue 16, item 1), on the real broker.

Two inputs are published together, a round every 100 ms with event time moving on; then input
b stops and a goes on. a's later records still join b's window (RANGE 60 s). Without idle
handling the MJoin would wait for b forever; with it, each result comes within the idle
timeout plus a second of the later of its two records being published, and the results are
exactly the naive join's.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import numpy as np
from confluent_kafka import Producer

from processors.commands.launcher import WorkerProcess, wait_for_count
from processors.runtime.producer import SIGN_HEADER
from topics.admin import ensure_topics, read_topic
from topics.avro import SchemaStore, decode_single_object, load_schema
from topics.columnar import RecordCodec
from topics.specs import TopicSpec

IDLE_MS = 2_000
RANGE_MS = 60_000

QUERY = """\
from processors.core.query import Query
from topics.avro import load_schema
schema = load_schema("packet")
query = Query({name!r})
for s in ("a", "b"):
    query.stream(s, topic={prefix!r} + "." + s, schema=schema, key="pid", timestamp="ts",
                 partitions=2)
    query.window(s, range_ms={range_ms})
query.join("a.pid", "b.pid").idle_timeout({idle})
query.select(a_dst="a.dst", b_dst="b.dst", a_ts="a.ts")
query.into({result!r}, partitions=2)
"""


def test_a_join_whose_one_input_stops_gives_results_within_the_idle_timeout(
    bootstrap: str, tmp_path: Path, topic_name: str
) -> None:
    prefix, result = topic_name, f"{topic_name}.out"
    ensure_topics(bootstrap, [TopicSpec(f"{prefix}.{s}", 2) for s in "ab"])
    query = tmp_path / "q.py"
    text = QUERY.format(name=topic_name, prefix=prefix, range_ms=RANGE_MS, idle=IDLE_MS,
                        result=result)  # fmt: skip
    query.write_text(text)
    codec = RecordCodec(load_schema("packet"))
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    sent: dict[str, list[tuple[int, int, int]]] = {"a": [], "b": []}  # (pid, dst, ts)
    published_at: dict[int, float] = {}  # dst -> wall time the record was published
    worker = WorkerProcess(query, bootstrap=bootstrap, state_dir=tmp_path / "state",
                           worker_id="idle-1")  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:  # the worker holds its partitions before the data comes
            try:
                if worker.held_partitions(f"{prefix}.a") == {0, 1}:
                    break
            except (OSError, KeyError, ValueError):
                pass
            assert worker.running and time.monotonic() < deadline, worker.log_tail(40)
            time.sleep(0.5)
        dst = 0
        for round_ in range(40):
            streams = "ab" if round_ < 20 else "a"  # b stops after 20 rounds
            for s in streams:
                for pid in range(5):
                    ts = 1_000 * round_ + pid
                    row = {"router": 0, "pid": pid, "ts": ts, "size": 100, "src": 0, "dst": dst}
                    cols = {k: np.array([v]) for k, v in row.items()}
                    cols["router"] = cols["router"].astype(np.int32)
                    cols["size"] = cols["size"].astype(np.int32)
                    buf, offsets = codec.encode_many(cols, 1)
                    producer.produce(f"{prefix}.{s}", bytes(buf[: offsets[1]]),
                                     key=str(pid).encode())  # fmt: skip
                    sent[s].append((pid, dst, ts))
                    published_at[dst] = time.time()
                    dst += 1
            producer.flush(10)
            time.sleep(0.1)

        # every a record joins each b record of its pid (b's window holds them all)
        want = Counter((ad, bd) for ap, ad, _ in sent["a"] for bp, bd, _ in sent["b"] if ap == bp)
        wait_for_count(bootstrap, result, sum(want.values()), 60.0, [worker])
    finally:
        code = worker.stop()
    assert code == 0, worker.log_tail(40)
    scope: dict = {}
    exec(text, scope)  # noqa: S102 (the test's own query text)
    schema = scope["query"].build().output_schema
    store = SchemaStore(load=False)
    store.add(schema)
    got: Counter = Counter()
    late = []
    for record in read_topic(bootstrap, result):
        row = decode_single_object(record.value, schema, store)
        assert dict(record.headers).get(SIGN_HEADER) != b"-1"
        got[(row["a_dst"], row["b_dst"])] += 1
        # a result is due once the later of its two records is in
        due = max(published_at[row["a_dst"]], published_at[row["b_dst"]])
        late.append(record.timestamp_ms / 1000.0 - due)
    assert got == want, (sum(got.values()), sum(want.values()))
    worst = max(late)
    print(f"idle input: worst result delay {worst:.2f} s (idle timeout {IDLE_MS / 1000:.1f} s)")
    assert worst < IDLE_MS / 1000 + 1.0
