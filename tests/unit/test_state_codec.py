"""The snapshot byte format: exact round trips, and bytes from outside never run code."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from processors.core.state_codec import SnapshotError, decode_state, encode_state

_dtypes = st.sampled_from(["<i8", "<i4", "<f8", "<f4", "|b1", "|u1", "<u8", "|i1"])
_arrays = _dtypes.flatmap(lambda d: hnp.arrays(np.dtype(d), hnp.array_shapes(min_dims=1)))
_leaves = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary()
    | _arrays
)
_trees = st.recursive(
    _leaves,
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=5), kids, max_size=4)
    ),
    max_leaves=12,
)


def _same(a: object, b: object) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b, True)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and a == b


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=6), _trees, max_size=5))
def test_round_trip_is_exact(tree: dict) -> None:
    assert _same(tree, decode_state(encode_state(tree)))


def test_nan_and_infinities_survive() -> None:
    out = decode_state(encode_state({"x": [float("nan"), float("inf"), -float("inf")]}))["x"]
    assert np.isnan(out[0]) and out[1:] == [float("inf"), -float("inf")]


def test_decoded_arrays_are_writable_copies() -> None:
    source = np.arange(4)
    out = decode_state(encode_state({"a": source}))["a"]
    out[0] = 99
    assert source[0] == 0


@pytest.mark.parametrize(
    "value", [object(), np.array(["a"], dtype=object), {1: 2}, {"__array__": 0}, {1.5}]
)
def test_values_that_are_not_data_are_refused(value: object) -> None:
    with pytest.raises(TypeError):
        encode_state({"v": value})


class _Boom:
    def __reduce__(self) -> tuple:
        return (os.system, ("touch /tmp/streamon-should-never-exist",))


def test_a_pickle_is_refused_and_never_run(tmp_path) -> None:
    payload = pickle.dumps({"state": _Boom()})
    with pytest.raises(SnapshotError, match="not a streamon snapshot"):
        decode_state(payload)
    assert not os.path.exists("/tmp/streamon-should-never-exist")


def test_corrupt_snapshots_are_refused_with_the_reason() -> None:
    good = bytes(encode_state({"a": np.arange(10), "b": "x"}))
    cases = {
        good[:6]: "cut off before its header",
        b"PK\x03\x04rest": "not a streamon snapshot",
        good[:12]: "cut off",
        good[:-3]: "needs 80 bytes",
        good + b"\0" * 8: "no field refers to",
        good.replace(b"<i8", b"|O8"): "not allowed",
        good.replace(b'"shape":[10]', b'"shape":[11]'): "needs 88 bytes",
        good.replace(b'"b":"x"', b'"b":"x",'): "not JSON",
    }
    for data, reason in cases.items():
        with pytest.raises(SnapshotError, match=reason):
            decode_state(data)
