"""Batch envelopes: exact round trips, the documented byte layout, and garbage always rejected."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from processors.core.batch import Batch, VarColumn
from topics.envelope import EnvelopeError, decode_batch, encode_batch

FIXED = ["bool", "int8", "int16", "int32", "int64", "uint8", "float32", "float64"]


@st.composite
def batches(draw: st.DrawFn) -> Batch:
    n = draw(st.integers(0, 40))
    names = draw(st.lists(st.text(max_size=8), max_size=6, unique=True))
    cols: dict[str, np.ndarray | VarColumn] = {}
    for name in names:
        kind = draw(st.sampled_from([*FIXED, "utf8", "binary"]))
        if kind == "utf8":
            cols[name] = VarColumn.from_values(draw(st.lists(st.text(), min_size=n, max_size=n)))
        elif kind == "binary":
            values = draw(st.lists(st.binary(), min_size=n, max_size=n))
            cols[name] = VarColumn.from_values(values, utf8=False)
        else:
            order = draw(st.sampled_from("<>="))
            cols[name] = draw(hnp.arrays(np.dtype(kind).newbyteorder(order), n))
    sign = np.array(draw(st.lists(st.sampled_from([1, -1]), min_size=n, max_size=n)), np.int8)
    ts = draw(hnp.arrays(np.int64, n))
    key = None
    if draw(st.booleans()):
        utf8 = draw(st.booleans())
        values = draw(st.lists(st.text() if utf8 else st.binary(), min_size=n, max_size=n))
        key = VarColumn.from_values(values, utf8=utf8)
    meta = draw(st.dictionaries(st.text(max_size=10), st.text(max_size=20), max_size=3))
    return Batch(cols, sign, ts, key, meta)


def assert_same(got: Batch, want: Batch) -> None:
    """Bit-exact equality (NaN payloads included), native dtypes, same meta and key kind."""
    assert list(got.columns) == list(want.columns)
    for name, col in want.columns.items():
        out = got.columns[name]
        if isinstance(col, VarColumn):
            assert isinstance(out, VarColumn) and out.equals(col)
            assert out.to_list() == col.to_list()
        else:
            assert isinstance(out, np.ndarray)
            assert out.dtype == col.dtype.newbyteorder("=") and out.dtype.isnative
            assert out.tobytes() == col.astype(out.dtype).tobytes()
    assert got.sign.dtype == np.int8 and got.ts.dtype == np.int64 and got.ts.dtype.isnative
    assert np.array_equal(got.sign, want.sign) and np.array_equal(got.ts, want.ts)
    assert (got.key is None) == (want.key is None)
    if want.key is not None:
        assert got.key is not None and got.key.equals(want.key)
    assert got.meta == want.meta


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_round_trip(batch: Batch) -> None:
    assert_same(decode_batch(encode_batch(batch)), batch)


def sample() -> Batch:
    batch = Batch(
        {
            "ok": np.array([True, False, True]),
            "id": np.array([7, -1, 2**40], np.int64),
            "t": np.array([1.5, np.nan, -0.0], np.float32),
            "site": VarColumn.from_values(["a", "", "zürich ✓"]),
            "raw": VarColumn.from_values([b"\x00\xff", b"", b"x"], utf8=False),
        },
        np.array([1, -1, 1], np.int8),
        np.array([10, 20, 30], np.int64),
        VarColumn.from_values(["k1", "k2", "k1"]),
        {"stream": "r"},
    )
    return batch


def envelopes() -> list[bytes]:
    full = sample()
    empty = full.take(np.zeros(0, np.int64))
    bare = Batch({}, np.ones(2, np.int8), np.arange(2, dtype=np.int64))
    return [encode_batch(b) for b in (full, empty, bare)]


def test_layout_matches_the_documented_spec() -> None:
    """docs/envelope-encoding.md, built by hand: header, schema section, aligned buffers."""
    batch = Batch(
        {"x": np.array([5, 6], np.int32), "s": VarColumn.from_values(["ab", "c"])},
        np.array([1, -1], np.int8),
        np.array([100, 200], np.int64),
        meta={"m": "v"},
    )
    schema = b"\x04\x01\x00x" + b"\x10\x01\x00s" + b"\x01\x00" + b"\x01\x00m\x01\x00\x00\x00v"
    want = b"SMBE\x01\x00" + struct.pack("<HII", 2, 2, len(schema)) + schema
    want += bytes(-len(want) % 8) + b"\x01\xff"  # sign
    want += bytes(6) + struct.pack("<2q", 100, 200)  # ts
    want += struct.pack("<2i", 5, 6)  # x
    want += struct.pack("<3q", 0, 2, 3) + b"abc"  # s: offsets, data
    assert encode_batch(batch) == want
    assert_same(decode_batch(want), batch)


def test_decoded_arrays_are_aligned_zero_copy_views() -> None:
    msg = encode_batch(sample())
    out = decode_batch(msg)
    for arr in [out.sign, out.ts, out.columns["id"], out.columns["site"].offsets]:
        assert arr.flags.aligned and not arr.flags.owndata and not arr.flags.writeable
    assert decode_batch(bytearray(msg)).ts.flags.writeable
    assert_same(decode_batch(memoryview(msg)), sample())
    out.take(np.array([2, 0]))  # the numba gather accepts the views


def test_offsets_not_starting_at_zero_are_rebased() -> None:
    col = VarColumn(np.array([3, 5, 6]), np.frombuffer(b"abcdefg", np.uint8), True)
    batch = Batch({"s": col}, np.ones(2, np.int8), np.zeros(2, np.int64))
    assert decode_batch(encode_batch(batch)).columns["s"].to_list() == ["de", "f"]


@pytest.mark.parametrize(
    "col", [np.zeros(2, np.uint16), np.zeros(2, np.complex64), np.zeros((2, 1)), np.array([1, "a"])]
)
def test_encode_rejects_unsupported_columns(col: np.ndarray) -> None:
    batch = Batch({"bad": col}, np.ones(2, np.int8), np.zeros(2, np.int64))
    with pytest.raises(EnvelopeError, match="'bad'"):
        encode_batch(batch)


def test_every_truncation_and_extension_is_rejected() -> None:
    for msg in envelopes():
        for i in range(len(msg)):
            with pytest.raises(EnvelopeError):
                decode_batch(msg[:i])
        with pytest.raises(EnvelopeError, match="trailing"):
            decode_batch(msg + b"\x00")


def check_garbage(data: bytes) -> None:
    """Either a clean EnvelopeError or a batch that is safe to use: nothing else, ever."""
    try:
        batch = decode_batch(data)
    except EnvelopeError:
        return
    for col in [*batch.columns.values(), batch.key]:
        if isinstance(col, VarColumn):
            col.to_list()
            col.take(np.arange(len(batch))[::-1])
    batch.rows()


def test_every_single_byte_corruption_fails_cleanly_or_decodes_safely() -> None:
    msg = envelopes()[0]
    for pos in range(len(msg)):
        mutated = bytearray(msg)
        for value in range(256):
            mutated[pos] = value
            check_garbage(bytes(mutated))


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_random_corruptions(data: st.DataObject) -> None:
    msg = bytearray(data.draw(st.sampled_from(envelopes())))
    for _ in range(data.draw(st.integers(1, 8))):
        msg[data.draw(st.integers(0, len(msg) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(msg)))
    check_garbage(bytes(msg[:cut]))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes(raw: bytes) -> None:
    check_garbage(raw)
    check_garbage(b"SMBE\x01" + raw)


def patched(msg: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(msg)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


def replaced(msg: bytes, old: bytes, new: bytes) -> bytes:
    assert msg.count(old) == 1, "the pattern must locate one buffer"
    return msg.replace(old, new)


SITE_OFFSETS = struct.pack("<4q", 0, 1, 1, 1 + len("zürich ✓".encode()))


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda m: b"XXXX" + m[4:], "bad magic"),
        (lambda m: patched(m, 4, "<B", 2), "unsupported envelope version 2"),
        (lambda m: patched(m, 5, "<B", 0x80), "unknown envelope flags"),
        (lambda m: patched(m, 6, "<H", 6), "truncated schema section: column 5 name"),
        (lambda m: patched(m, 8, "<I", 4), None),  # more tuples than buffers: some check fails
        (lambda m: patched(m, 8, "<I", 2), None),
        (lambda m: patched(m, 12, "<I", 2**32 - 1), "schema section ends at 4294967311"),
        (lambda m: replaced(m, b"\x01\xff\x01", b"\x01\x00\x01"), "sign of tuple 1 is 0"),
        (lambda m: replaced(m, b"\x01\x00\x01", b"\x01\x07\x01"), "'ok': boolean byte of"),
        (lambda m: replaced(m, "zürich".encode(), b"z\xc3\x28rich"), "'site': values are not"),
        (
            lambda m: replaced(m, SITE_OFFSETS[:16], b"\0" * 8 + b"\2" + b"\0" * 7),
            "'site': offsets",
        ),
    ],
)
def test_specific_reasons(mutate, reason: str | None) -> None:
    with pytest.raises(EnvelopeError, match=reason):
        decode_batch(mutate(envelopes()[0]))


def test_value_boundary_inside_a_character_is_rejected() -> None:
    col = VarColumn.from_values(["é"])  # two bytes; cut it into two values
    split = VarColumn(np.array([0, 1, 2]), col.data, utf8=False)
    msg = bytearray(encode_batch(Batch({"s": split}, np.ones(2, np.int8), np.zeros(2, np.int64))))
    msg[16] = 16  # type code: binary -> utf8
    with pytest.raises(EnvelopeError, match="not valid UTF-8"):
        decode_batch(bytes(msg))


def test_not_bytes() -> None:
    with pytest.raises(EnvelopeError):
        decode_batch("SMBE")  # type: ignore[arg-type]
    with pytest.raises(EnvelopeError):
        decode_batch(np.zeros(8, np.int8)[::2])  # type: ignore[arg-type]


def test_every_benchmarked_codec_round_trips() -> None:
    """The candidates behind docs/envelope-encoding.md encode what they decode, exactly."""
    from processors.bench.envelope_codecs import codecs, realistic_batch

    batch = realistic_batch(50)
    candidates = codecs(batch)
    assert {"custom (topics.envelope)", "pickle-5"} <= set(candidates)
    for name, (encode, decode) in candidates.items():
        assert decode(encode(batch)).equals(batch), name
