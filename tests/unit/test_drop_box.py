"""The drop box (processors/kernels/dropbox.py, processors/runtime/shedding.py): its share, its
independence from everything but the record's place, and the SHED records that set it."""

from __future__ import annotations

import numpy as np
import pytest

from processors.runtime.control import SHED, ControlRecord
from processors.runtime.record_block import RecordBlock
from processors.runtime.shedding import DropBox, Shedding


def block(partition: int, first: int, n: int) -> RecordBlock:
    offsets = list(range(first, first + n))
    keys = [str(o).encode() for o in offsets]
    return RecordBlock("t", partition, offsets, [1_000 + o for o in offsets], keys,
                       [b"v%d" % o for o in offsets])  # fmt: skip


@pytest.mark.parametrize("keep", [0.0, 0.05, 0.3, 0.5, 0.9, 1.0])
def test_the_kept_share_is_the_setting_within_five_sigmas(keep: float) -> None:
    box = DropBox("q", "a", "t")
    box.set(keep)
    n = 200_000
    kept = sum(len(box.apply(block(p, 0, n // 4))) for p in range(4))
    sigma = (keep * (1 - keep) / n) ** 0.5
    assert abs(kept / n - keep) <= 5 * sigma + 1e-12
    assert box.kept == kept and box.dropped == n - kept


def test_the_same_records_are_kept_whatever_the_blocks_and_a_restart() -> None:
    """A restart reads the partition again, in other blocks: the same records are kept; the
    choice depends on the query, stream, topic, partition and offset only."""
    first, again = DropBox("q", "a", "t"), DropBox("q", "a", "t")
    first.set(0.4)
    again.set(0.4)
    whole = first.apply(block(2, 0, 5_000))
    pieces = [again.apply(block(2, lo, 500)) for lo in range(0, 5_000, 500)]
    assert whole.offsets == [o for p in pieces for o in p.offsets]
    assert whole.values == [b"v%d" % o for o in whole.offsets]  # the columns stay aligned
    assert whole.keys == [str(o).encode() for o in whole.offsets]
    other = DropBox("q", "b", "t")  # another box: another, independent choice
    other.set(0.4)
    overlap = len(set(whole.offsets) & set(other.apply(block(2, 0, 5_000)).offsets))
    assert abs(overlap / 5_000 - 0.16) < 0.03
    box = DropBox("q", "a", "t")
    box.set(1.0)
    same = block(0, 0, 10)
    assert box.apply(same) is same  # keeping all costs nothing


def test_shed_records_set_every_box_and_are_remembered() -> None:
    shedding = Shedding("q", [("a", "ta"), ("b", "tb")], clock=lambda: 100.0)

    def record(payload: dict) -> ControlRecord:
        return ControlRecord(SHED, "q", "", payload, 0, "test", 1)

    shedding.apply(record({"keep": {"a": 0.25}, "reason": "overload"}))
    assert shedding.kept_fraction() == {"a": 0.25, "b": 1.0} and shedding.active
    snap = shedding.snapshot()
    assert snap["since_ms"] == 100_000 and snap["reason"] == "overload"
    assert [e["to"] for e in shedding.events()] == [{"a": 0.25, "b": 1.0}]
    assert shedding.events() == []  # reported once
    shedding.apply(record({"keep": {}, "reason": "load fell"}))
    assert not shedding.active and shedding.snapshot()["since_ms"] is None
    with pytest.raises(ValueError, match="streams"):
        shedding.apply(record({"keep": {"c": 0.5}}))
    with pytest.raises(ValueError, match="shares"):
        shedding.apply(record({"keep": {"a": 1.5}}))


def test_the_mask_is_numba_and_matches_apply() -> None:
    box = DropBox("q", "a", "t")
    box.set(0.5)
    mask = box.mask(1, np.arange(1_000, dtype=np.int64))
    kept = box.apply(block(1, 0, 1_000)).offsets
    assert kept == np.flatnonzero(mask).tolist()


def test_a_shed_querys_results_carry_the_share_and_scaled_estimates() -> None:
    """``_kept`` is the product of the inputs' shares; count and sum get Horvitz-Thompson
    estimates beside them; the records read back by the apache avro package."""
    import io
    import json

    import avro.io
    import avro.schema

    from processors.core.batch import Batch
    from processors.core.query import Query
    from processors.runtime.results import SharesStamp
    from topics.avro import load_schema
    from topics.columnar import RecordCodec

    packet = load_schema("packet")
    q = Query("grouped")
    q.stream("a", topic="ta", schema=packet, key="pid", timestamp="ts").window("a", range_ms=1_000)
    q.stream("b", topic="tb", schema=packet, key="pid", timestamp="ts").window("b", range_ms=1_000)
    q.join("a.pid", "b.pid").group_by("a.src")
    q.aggregate(n="count", total=("sum", "b.size"), top=("max", "b.size")).into("out").shed(500)
    plan = q.build()
    names = [f["name"] for f in plan.output_schema["fields"]]
    assert names == ["src", "n", "total", "top", "_kept", "n_est", "total_est"]
    stamp = SharesStamp.of(plan, lambda: {"a": 0.5, "b": 0.8})
    assert stamp is not None
    columns = {"src": [1, 2], "n": [4, 10], "total": [400, 1_000], "top": [150, 200]}
    batch = Batch.inserts({k: np.array(v) for k, v in columns.items()})
    out = stamp(batch)
    data, offsets = RecordCodec(plan.output_schema).encode_many(out.columns, 2)
    schema = avro.schema.parse(json.dumps(plan.output_schema))
    reader = avro.io.DatumReader(schema, schema)
    rows = [reader.read(avro.io.BinaryDecoder(io.BytesIO(bytes(data[offsets[i] + 10:
            offsets[i + 1]])))) for i in range(2)]  # fmt: skip
    assert rows[0]["_kept"] == pytest.approx(0.4) and rows[1]["n_est"] == pytest.approx(25.0)
    assert rows[0]["total_est"] == pytest.approx(1_000.0) and rows[1]["top"] == 200
    unshed = Query("plain").stream("a", topic="ta", schema=packet).into("o").build()
    assert SharesStamp.of(unshed, dict) is None
    with pytest.raises(Exception, match="_kept"):
        Query("x").stream("a", topic="ta", schema=packet).select(_kept="a.size").into("o").shed(
            500
        ).build()


def test_control_shed_reads_its_shares_and_names_a_bad_one() -> None:
    from processors.cli import build_parser
    from processors.commands.control_cmd import shares

    assert shares(["a=0.5", "b=1"], ["a", "b"]) == {"a": 0.5, "b": 1.0}
    for bad, why in [("c=0.5", "STREAM one of a, b"), ("a=x", "not a number"),
                     ("a=1.5", "between 0 and 1"), ("a", "STREAM=SHARE")]:  # fmt: skip
        with pytest.raises(ValueError, match=why):
            shares([bad], ["a", "b"])
    args = build_parser().parse_args(["control", "shed", "q.cql", "--keep", "a=0.2", "--lift"])
    assert args.keep == ["a=0.2"] and args.lift
    assert build_parser().parse_args(["control", "policy", "q", "fifo"]).policy == "fifo"
