"""Key coding shared by the window (PARTITION BY) and aggregate (GROUP BY) stages."""

from __future__ import annotations

import numpy as np

from processors.core.batch import VarColumn
from processors.kernels.keys import hash_var, key_codes, same_as_representative


def _groups(codes: np.ndarray) -> list[list[int]]:
    """Rows grouped by code, in order of first appearance (independent of code values)."""
    out: dict[int, list[int]] = {}
    for row, code in enumerate(codes.tolist()):
        out.setdefault(code, []).append(row)
    return list(out.values())


def test_floats_group_by_value_zero_signs_and_nans_alike() -> None:
    col = np.array([0.0, -0.0, np.nan, 1.5, float("nan"), 1.5])
    codes, first = key_codes([col], len(col))
    assert _groups(codes) == [[0, 1], [2, 4], [3, 5]]
    assert sorted(first.tolist()) == [0, 2, 3]
    assert all(codes[first[c]] == c for c in range(len(first)))


def test_strings_and_several_columns() -> None:
    names = VarColumn.from_values(["a", "bb", "a", "", "bb", "a"])
    nums = np.array([1, 1, 2, 1, 1, 1], np.int64)
    codes, first = key_codes([names, nums], 6)
    assert _groups(codes) == [[0, 5], [1, 4], [2], [3]]
    assert sorted(first.tolist()) == [0, 1, 2, 3]


def test_no_column_is_one_key() -> None:
    codes, first = key_codes([], 4)
    assert codes.tolist() == [0, 0, 0, 0] and first.tolist() == [0]
    codes, first = key_codes([], 0)
    assert len(codes) == 0 and len(first) == 0


def test_hash_mixes_in_the_length_and_the_check_sees_collisions() -> None:
    col = VarColumn.from_values(["", "\x00", "\x00\x00"])
    hashes = hash_var(col.offsets, col.data)
    assert len(set(hashes.tolist())) == 3
    # a forced "collision": every value coded as the first one is caught
    codes = np.zeros(3, np.int64)
    assert not same_as_representative(col.offsets, col.data, codes, np.zeros(1, np.int64))
