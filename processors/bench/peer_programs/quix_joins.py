"""Quix Streams on the embedded broker: the bench's RANGE joins (``join3``, ``netmon``).

Two phases, one spec (JSON): ``produce`` writes each input's CSV rows to its topic (key: the join
key, partition: key mod partitions, so the topics are co-partitioned; timestamp: the tuple's
``ts``; value: JSON), and ``run`` joins them with chained ``StreamingDataFrame.join_interval``
calls and counts the results in process (count and checksum, like Flink's aggregate).

Quix's interval join stores both sides and, for each record at t, looks up the other side's
records of the same key in [t - bound, t] (bounds inclusive, integer ms); Quix pops the records
of a partition number in timestamp order across topics, so each pair is found by its later
record. A RANGE of R (pairs less than R apart) is then ``backward = forward = R - 1``. A joined
record carries its later record's timestamp, so the next join in the chain matches a superset;
the exact condition (max(ts) - min(ts) < R over the joined tuples) filters it afterwards.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

from peer_common import emit, now, quix_application

MOD = 1_000_000_007


def produce(spec: dict[str, Any]) -> None:
    """Every input's rows to its topic, in the file's (timestamp) order."""
    from confluent_kafka import Producer

    parts = spec["partitions"]
    producer = Producer({"bootstrap.servers": spec["bootstrap"], "linger.ms": 20,
                         "batch.num.messages": 10000, "queue.buffering.max.messages": 500000,
                         "compression.type": "none"})  # fmt: skip
    for src in spec["inputs"]:
        names, key = src["columns"], src["key"]
        with open(src["csv"], newline="") as f:
            for row in csv.reader(f):
                rec = dict(zip(names, (int(x) for x in row), strict=True))
                k = rec[key]
                while True:
                    try:
                        producer.produce(src["topic"], value=json.dumps(rec).encode(),
                                         key=str(k).encode(), partition=k % parts,
                                         timestamp=rec["ts"])  # fmt: skip
                        break
                    except BufferError:
                        producer.poll(0.05)
                producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("producer did not flush")
    emit({"produced": True})


def tag_input(i: int, id_field: str, extra: str | None):
    """Input i's value as the joined record's part: its id (and ``extra``), lo = hi = ts."""

    def tag(v: dict[str, Any]) -> dict[str, Any]:
        out = {f"i{i}": v[id_field], "lo": v["ts"], "hi": v["ts"]}
        if extra and i == 0:
            out["x"] = v[extra]
        return out

    return tag


def merge(left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
    """A new dict (Quix forbids mutating the inputs): both parts, the span widened."""
    out = {**left, **right}
    out["lo"], out["hi"] = min(left["lo"], right["lo"]), max(left["hi"], right["hi"])
    return out


def result_hash(kind: str, v: dict[str, Any]) -> int:
    """A joined record's term of the bench's checksum (peers_data.join_checksum or
    netmon_checksum, one row)."""
    if kind == "join3":
        return (v["i0"] * 1_000_003 + v["i1"] * 1009 + v["i2"]) % MOD
    return (v["i0"] % MOD + v["x"]) % MOD


def run(spec: dict[str, Any]) -> None:
    from quixstreams.models.serializers import JSONDeserializer

    rng, kind, total = spec["range_ms"], spec["kind"], spec["records"]
    app = quix_application(spec, state_dir=spec["state_dir"])
    seen = {"n": 0, "t_first": 0.0}
    acc = {"count": 0, "checksum": 0, "total": 0}

    def count(_value: Any) -> None:
        if not seen["n"]:
            seen["t_first"] = now()
        seen["n"] += 1
        if seen["n"] >= total:
            app.stop()

    id_field, extra = ("id", None) if kind == "join3" else ("pid", "size")
    frames = []
    for i, src in enumerate(spec["inputs"]):
        topic = app.topic(src["topic"], value_deserializer=JSONDeserializer())
        config = topic.broker_config  # the embedded broker describes no retention.ms, which
        if "retention.ms" not in config.extra_config:  # Quix's join store config requires
            config.extra_config["retention.ms"] = "-1"
            topic.broker_config = config
        frames.append(app.dataframe(topic).update(count).apply(tag_input(i, id_field, extra)))
    joined = frames[0]
    for i, right in enumerate(frames[1:], start=1):
        joined = joined.join_interval(right, how="inner", on_merge=merge, grace_ms=rng,
                                      name=f"join{i}", backward_ms=rng - 1,
                                      forward_ms=rng - 1)  # fmt: skip
    joined = joined.filter(lambda v: v["hi"] - v["lo"] < rng)

    def tally(v: dict[str, Any]) -> None:
        acc["count"] += 1
        acc["checksum"] += result_hash(kind, v)
        acc["total"] += v.get("x", 0)

    joined.update(tally)
    app.run()
    t1, t0 = now(), seen["t_first"]
    result = {"records": total, "seen": seen["n"], "t_ready": t0, "t0": t0, "t1": t1,
              "count": acc["count"], "checksum": acc["checksum"] % MOD,
              "on_broker": True}  # fmt: skip
    if kind == "netmon":
        result["extra"] = [acc["total"]]
    emit(result)


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    produce(spec) if spec["phase"] == "produce" else run(spec)


if __name__ == "__main__":
    main()
