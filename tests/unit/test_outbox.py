"""The exactly-once outbox: what is stored comes back message for message; what is stored badly
(the state topic is writable by anyone with access) is refused with the reason, never run; keyed
messages are placed where Kafka's default partitioner would place them."""

from __future__ import annotations

import numpy as np
import pytest

from processors.core.batch import VarColumn
from processors.core.state_codec import SnapshotError, decode_state, encode_state
from processors.kernels.routing import kafka_partitions
from processors.runtime.outbox import Outbox, resolve_partitions
from processors.runtime.tail_tags import parse_tag, tag

# Kafka's own test vectors for its murmur2 (org.apache.kafka.common.utils.UtilsTest), as the
# signed 32-bit hash: the partition is (hash & 0x7fffffff) % partitions
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_keys_go_where_kafkas_murmur2_puts_them() -> None:
    keys = VarColumn.from_values(list(JAVA_MURMUR2), utf8=False)
    for partitions in (1, 3, 12, 2**31 - 1):
        want = [(h & 0x7FFFFFFF) % partitions for h in JAVA_MURMUR2.values()]
        assert kafka_partitions(keys, partitions).tolist() == want


def sample() -> Outbox:
    box = Outbox()
    box.add("t.env", b"\x00envelope", None, 3, 1_700_000_000_000)
    box.add("dlq", b"dead", b"k", 0, None)
    keys = VarColumn.from_values([b"a", b"", b"ccc"], utf8=False)
    buf = np.frombuffer(b"onetwothree", np.uint8)
    offsets = np.array([0, 3, 6, 11], np.int64)
    where = resolve_partitions(3, keys, None, lambda: 4)
    box.add_many("out", buf, offsets, where, keys, np.array([False, True, False]))
    return box


def test_an_outbox_comes_back_message_for_message() -> None:
    box = sample()
    again = Outbox.decode(box.encode())
    assert list(again) == list(box)
    assert len(again) == 5
    messages = list(box)
    assert messages[0] == ("t.env", 3, None, b"\x00envelope", 1_700_000_000_000, False)
    assert messages[3][2] == b"" and messages[3][5] is True  # empty key kept; delete flagged
    assert box.targets() == {("t.env", 3), ("dlq", 0)} | {("out", q) for q in where_of(box)}
    assert Outbox.decode(b"").messages == 0


def where_of(box: Outbox) -> list[int]:
    return [m[1] for m in box if m[0] == "out"]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda p: p.update(bounds=np.array([0, 3, 2, 11], np.int64)), "bounds"),
        (lambda p: p.update(bounds=np.array([0, 3, 6, 99], np.int64)), "bounds"),
        (lambda p: p.update(partitions=np.array([0, -1, 0], np.int32)), "negative"),
        (lambda p: p.update(key_bounds=np.array([0, 1], np.int64)), "key bounds"),
        (lambda p: p.update(deletes=np.array([True], np.bool_)), "delete flags"),
        (lambda p: p.update(topic=""), "topic"),
        (lambda p: p.update(timestamp_ms="soon"), "timestamp"),
        (lambda p: p.update(data=np.zeros(11, np.float64)), "data"),
    ],
)
def test_a_tampered_outbox_is_refused_with_the_reason(change, reason: str) -> None:
    tree = decode_state(sample().encode())
    change(tree["parts"][2])
    with pytest.raises(SnapshotError, match=reason):
        Outbox.decode(encode_state(tree))


def test_other_bytes_are_not_an_outbox() -> None:
    with pytest.raises(SnapshotError):
        Outbox.decode(b"\x80\x04pickle")
    with pytest.raises(SnapshotError, match="outbox"):
        Outbox.decode(encode_state({"kind": "window", "version": 1}))


def test_tags_name_the_unit_and_epoch() -> None:
    assert parse_tag(tag("stream.r/3", 17)) == ("stream.r/3", 17)
    assert parse_tag(b"no tag") is None
    assert parse_tag(b"\xff/1") is None
