"""Columnar batches: VarColumn and Batch operations against Python-list oracles, and envelopes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.core.batch import DELETE, INSERT, Batch, VarColumn
from processors.kernels.gather import gather_var
from processors.workloads.examples import SITES, reading_columns
from topics.envelope import MAX_ENVELOPE_BYTES, decode_batch, encode_batch, encode_envelopes

WORDS = ["", "a", "héllo", "日本語", "", "🙂 emoji", "tab\tand\nnewline", "z" * 40]
# header, schema section and up to 7 bytes of alignment padding per buffer
HEADER_SLACK = 256


def small_batch() -> Batch:
    """Four tuples with fixed, text and binary columns and keys."""
    return Batch(
        {
            "id": np.array([1, 2, 3, 4], np.int64),
            "x": np.array([0.5, -1.0, 2.25, 8.0], np.float64),
            "name": VarColumn.from_values(["a", "", "日本", "dd"]),
            "blob": VarColumn.from_values([b"\x00", b"\xff\xfe", None, b""], utf8=False),
        },
        np.array([INSERT, DELETE, INSERT, INSERT], np.int8),
        np.array([10, 20, 30, 40], np.int64),
        VarColumn.from_values([b"k1", b"k2", b"k3", b"k4"], utf8=False),
        {"stream": "r"},
    )


# -- VarColumn ---------------------------------------------------------------------------------


def test_varcolumn_from_values_layout_and_to_list() -> None:
    col = VarColumn.from_values(WORDS)
    encoded = [w.encode() for w in WORDS]
    assert len(col) == len(WORDS)
    assert col.offsets.dtype == np.int64 and col.data.dtype == np.uint8
    assert col.offsets.tolist() == [0, *np.cumsum([len(e) for e in encoded]).tolist()]
    assert col.data.tobytes() == b"".join(encoded)
    assert col.to_list() == WORDS
    assert col.utf8 is True
    assert [col.value(i) for i in range(len(WORDS))] == WORDS


def test_varcolumn_binary_values_and_none_as_empty() -> None:
    col = VarColumn.from_values([b"\x00\xff", None, b"", "é"], utf8=False)
    assert col.offsets.tolist() == [0, 2, 2, 2, 4]
    assert col.to_list() == [b"\x00\xff", b"", b"", b"\xc3\xa9"]


def test_varcolumn_from_values_copies_into_a_writable_buffer() -> None:
    col = VarColumn.from_values(["ab"])
    col.data[0] = ord("x")
    assert col.to_list() == ["xb"]


def test_empty_varcolumn() -> None:
    col = VarColumn.from_values([])
    assert len(col) == 0 and col.offsets.tolist() == [0] and len(col.data) == 0
    assert col.to_list() == []
    assert col.take(np.array([], np.int64)).to_list() == []
    assert col.slice(0, 0).equals(col)
    assert VarColumn.concat([col, col]).equals(col)


def test_varcolumn_slice_rebases_offsets() -> None:
    col = VarColumn.from_values(WORDS)
    part = col.slice(2, 6)
    assert part.to_list() == WORDS[2:6]
    assert part.offsets[0] == 0 and part.offsets.tolist()[-1] == len(part.data)
    assert col.slice(3, 3).to_list() == []
    assert col.slice(0, len(WORDS)).equals(col)


def test_varcolumn_take_reorders_repeats_and_keeps_utf8_flag() -> None:
    col = VarColumn.from_values(WORDS)
    idx = [7, 0, 2, 2, 5, 1]
    taken = col.take(np.array(idx))
    assert taken.to_list() == [WORDS[i] for i in idx]
    assert taken.offsets.tolist()[-1] == len(taken.data)
    binary = VarColumn.from_values([b"a", b"bc"], utf8=False).take(np.array([1, 1, 0]))
    assert binary.utf8 is False and binary.to_list() == [b"bc", b"bc", b"a"]


def test_gather_var_kernel_directly() -> None:
    offsets = np.array([0, 1, 3, 3, 6], np.int64)
    data = np.frombuffer(b"abbccc", np.uint8)
    out_offsets, out = gather_var(offsets, data, np.array([3, 1, 2], np.int64))
    assert out_offsets.tolist() == [0, 3, 5, 5]
    assert out.tobytes() == b"cccbb"


def test_varcolumn_concat_and_equals() -> None:
    a = VarColumn.from_values(WORDS[:3])
    b = VarColumn.from_values(WORDS[3:])
    joined = VarColumn.concat([a, VarColumn.from_values([]), b])
    assert joined.to_list() == WORDS
    assert joined.equals(VarColumn.from_values(WORDS))
    # concat of slices (offsets not starting at 0 in the parent)
    col = VarColumn.from_values(WORDS)
    assert VarColumn.concat([col.slice(0, 4), col.slice(4, len(WORDS))]).equals(col)


def test_varcolumn_equals_compares_values_and_flag() -> None:
    col = VarColumn.from_values(["a", "b"])
    assert col.equals(VarColumn.from_values(["a", "b"]))
    assert not col.equals(VarColumn.from_values(["a", "c"]))
    assert not col.equals(VarColumn.from_values(["ab", ""]))  # same bytes, other split
    assert not col.equals(VarColumn.from_values(["a", "b"], utf8=False))
    assert not col.equals(["a", "b"])


def test_varcolumn_concat_of_nothing_is_empty() -> None:
    assert VarColumn.concat([]).to_list() == []


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.text(max_size=12), max_size=30),
    data=st.data(),
)
def test_varcolumn_take_slice_match_list_oracle(values: list[str], data: st.DataObject) -> None:
    col = VarColumn.from_values(values)
    n = len(values)
    idx = data.draw(st.lists(st.integers(-n, n - 1), max_size=40) if n else st.just([]))
    assert col.take(np.array(idx, np.int64)).to_list() == [values[i] for i in idx]
    lo = data.draw(st.integers(0, n))
    hi = data.draw(st.integers(lo, n))
    assert col.slice(lo, hi).to_list() == values[lo:hi]
    assert VarColumn.concat([col.slice(0, lo), col.slice(lo, n)]).equals(col)


# -- Batch -------------------------------------------------------------------------------------


def test_inserts_builds_signs_and_ts() -> None:
    b = Batch.inserts({"a": np.array([5, 6, 7]), "s": VarColumn.from_values(["x", "", "z"])})
    assert len(b) == 3
    assert b.sign.dtype == np.int8 and b.sign.tolist() == [1, 1, 1]
    assert b.ts.dtype == np.int64 and b.ts.tolist() == [0, 0, 0]
    assert b.key is None and b.meta == {}
    timed = Batch.inserts({"a": np.array([1, 2])}, ts=[100, 200])
    assert timed.ts.dtype == np.int64 and timed.ts.tolist() == [100, 200]
    empty = Batch.inserts({})
    assert len(empty) == 0 and empty.rows() == []


def test_length_mismatch_raises_naming_lengths() -> None:
    with pytest.raises(ValueError, match=r"sign=3 ts=3 \{'a': 3, 'b': 2\}"):
        Batch({"a": np.arange(3), "b": np.arange(2)}, np.ones(3, np.int8), np.zeros(3, np.int64))
    with pytest.raises(ValueError, match=r"sign=2 ts=3"):
        Batch({"a": np.arange(2)}, np.ones(2, np.int8), np.zeros(3, np.int64))
    with pytest.raises(ValueError, match=r"'s': 1"):
        Batch.inserts({"a": np.arange(2), "s": VarColumn.from_values(["x"])})
    with pytest.raises(ValueError, match="key column has 1 values for 3 tuples"):
        Batch(
            {"a": np.arange(3)},
            np.ones(3, np.int8),
            np.zeros(3, np.int64),
            VarColumn.from_values(["k"]),
        )


def test_rows() -> None:
    assert small_batch().rows() == [
        {"id": 1, "x": 0.5, "name": "a", "blob": b"\x00"},
        {"id": 2, "x": -1.0, "name": "", "blob": b"\xff\xfe"},
        {"id": 3, "x": 2.25, "name": "日本", "blob": b""},
        {"id": 4, "x": 8.0, "name": "dd", "blob": b""},
    ]


def test_take_filter_slice() -> None:
    b = small_batch()
    t = b.take(np.array([3, 0, 0]))
    assert [r["id"] for r in t.rows()] == [4, 1, 1]
    assert [r["name"] for r in t.rows()] == ["dd", "a", "a"]
    assert t.sign.tolist() == [1, 1, 1] and t.ts.tolist() == [40, 10, 10]
    assert t.key is not None and t.key.to_list() == [b"k4", b"k1", b"k1"]
    assert t.meta == {"stream": "r"} and t.meta is not b.meta

    f = b.filter(np.array([False, True, True, False]))
    assert [r["id"] for r in f.rows()] == [2, 3]
    assert f.sign.tolist() == [-1, 1] and f.ts.tolist() == [20, 30]
    assert f.key is not None and f.key.to_list() == [b"k2", b"k3"]
    assert len(b.filter(np.zeros(4, bool))) == 0

    s = b.slice(1, 3)
    assert s.equals(f)
    assert s.rows() == b.rows()[1:3]
    assert len(b.slice(2, 2)) == 0


def test_concat_round_trips_slices() -> None:
    b = small_batch()
    again = Batch.concat([b.slice(0, 1), b.slice(1, 1), b.slice(1, 4)])
    assert again.equals(b)
    assert again.rows() == b.rows()
    assert again.meta == {"stream": "r"}
    assert Batch.concat([b]) is b
    with pytest.raises(ValueError, match="zero batches"):
        Batch.concat([])
    no_key = Batch.concat([b.slice(0, 2), Batch(b.columns, b.sign, b.ts)])
    assert no_key.key is None and len(no_key) == 6


def test_equals_is_exact() -> None:
    b = small_batch()
    assert b.equals(small_batch())
    other_ts = small_batch()
    other_ts.ts[0] = 11
    assert not b.equals(other_ts)
    other_sign = small_batch()
    other_sign.sign[1] = INSERT
    assert not b.equals(other_sign)
    other_dtype = small_batch()
    other_dtype.columns["id"] = other_dtype.columns["id"].astype(np.int32)
    assert not b.equals(other_dtype)
    other_key = small_batch()
    other_key.key = None
    assert not b.equals(other_key) and not other_key.equals(b)
    reordered = small_batch()
    reordered.columns = {k: reordered.columns[k] for k in ["x", "id", "name", "blob"]}
    assert not b.equals(reordered)
    other_text = small_batch()
    other_text.columns["name"] = VarColumn.from_values(["a", "", "日本", "de"])
    assert not b.equals(other_text)
    assert not b.equals(b.rows())


def test_nbytes_counts_every_buffer() -> None:
    b = small_batch()
    # sign 4 + ts 32 + id 32 + x 32 + name (40 offsets + 9 data) + blob (40 + 3) + key (40 + 8)
    assert b.nbytes() == 4 + 32 + 32 + 32 + (40 + 9) + (40 + 3) + (40 + 8)
    assert Batch.inserts({}).nbytes() == 0


@st.composite
def batch_and_rows(draw: st.DrawFn) -> tuple[Batch, list[dict[str, object]]]:
    """A random batch and its rows as the Python oracle."""
    n = draw(st.integers(0, 25))
    ints = draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=n, max_size=n))
    texts = draw(st.lists(st.text(max_size=6), min_size=n, max_size=n))
    flags = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    b = Batch.inserts(
        {
            "i": np.array(ints, np.int64),
            "t": VarColumn.from_values(texts),
            "f": np.array(flags, np.bool_),
        },
        ts=np.arange(n, dtype=np.int64),
    )
    rows = [{"i": i, "t": t, "f": f} for i, t, f in zip(ints, texts, flags, strict=True)]
    return b, rows


@settings(max_examples=150, deadline=None)
@given(case=batch_and_rows(), data=st.data())
def test_batch_take_filter_match_list_oracle(
    case: tuple[Batch, list[dict[str, object]]], data: st.DataObject
) -> None:
    b, rows = case
    n = len(rows)
    assert b.rows() == rows
    idx = data.draw(st.lists(st.integers(0, n - 1), max_size=40) if n else st.just([]))
    taken = b.take(np.array(idx, np.int64))
    assert taken.rows() == [rows[i] for i in idx]
    assert taken.ts.tolist() == idx
    mask = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    kept = b.filter(np.array(mask, bool))
    assert kept.rows() == [r for r, m in zip(rows, mask, strict=True) if m]
    cut = data.draw(st.integers(0, n))
    assert Batch.concat([b.slice(0, cut), b.slice(cut, n)]).equals(b)


# -- envelopes ---------------------------------------------------------------------------------


def test_reading_columns_is_deterministic() -> None:
    b = reading_columns(1000, seed=3)
    assert b.equals(reading_columns(1000, seed=3))
    assert not b.equals(reading_columns(1000, seed=4))
    assert set(b.columns["site"].to_list()) <= set(SITES)
    assert b.ts.tolist() == b.columns["ts"].tolist()


@pytest.mark.parametrize("max_bytes", [MAX_ENVELOPE_BYTES, 100_000, 4096])
def test_encode_envelopes_splits_a_big_batch_exactly(max_bytes: int) -> None:
    batch = reading_columns(50_000)
    assert batch.nbytes() > MAX_ENVELOPE_BYTES
    envelopes = encode_envelopes(batch, max_bytes)
    assert len(envelopes) >= -(-batch.nbytes() // max_bytes)
    sizes = [len(e) for e in envelopes]
    assert max(sizes) <= max_bytes + HEADER_SLACK, f"largest envelope {max(sizes)} bytes"
    parts = [decode_batch(e) for e in envelopes]
    assert all(len(p) > 0 for p in parts)
    whole = Batch.concat(parts)
    assert len(whole) == 50_000
    assert whole.equals(batch)
    assert whole.columns["site"].to_list() == batch.columns["site"].to_list()


def test_encode_envelopes_keeps_a_small_batch_whole() -> None:
    batch = reading_columns(100)
    envelopes = encode_envelopes(batch)
    assert envelopes == [encode_batch(batch)]
    assert decode_batch(envelopes[0]).equals(batch)
    assert encode_envelopes(Batch.inserts({"a": np.zeros(0, np.int64)})) == [
        encode_batch(Batch.inserts({"a": np.zeros(0, np.int64)}))
    ]


def test_encode_envelopes_bounds_skewed_batches() -> None:
    n = 2000
    values = [b"x" * 20_000 if i < 200 else b"" for i in range(n)]
    batch = Batch.inserts({"payload": VarColumn.from_values(values, utf8=False)})
    sizes = [len(e) for e in encode_envelopes(batch)]
    assert max(sizes) <= MAX_ENVELOPE_BYTES + HEADER_SLACK, sizes


def test_varcolumn_take_checks_bounds_and_wraps_negative_indices() -> None:
    col = VarColumn.from_values(["a", "bb", "ccc"])
    assert col.take(np.array([-1, 0])).to_list() == ["ccc", "a"]
    for bad in ([3], [-4], [100]):
        with pytest.raises(IndexError):
            col.take(np.array(bad))
