"""A stateful stage's pinned columns (processors.stages.pinned_columns): a batch lacking some
gets them as zeros in the pinned order; one bringing another column or type is refused."""

from __future__ import annotations

import numpy as np

from processors.core.batch import Batch, VarColumn
from processors.stages.pinned_columns import column_type, filled, zeros

PINNED = [("id", "<i8"), ("site", "string"), ("x", "<f8"), ("x?", "|b1")]


def batch(**columns) -> Batch:  # noqa: ANN003
    n = len(next(iter(columns.values())))
    return Batch.inserts(columns, ts=np.arange(n, dtype=np.int64))


def test_a_batch_without_unread_columns_gets_zeros_in_the_pinned_order() -> None:
    got = filled(batch(x=np.array([1.5, 2.5]), id=np.array([7, 8])), PINNED)
    assert got is not None and list(got.columns) == ["id", "site", "x", "x?"]
    assert got.columns["id"].tolist() == [7, 8] and got.columns["x"].tolist() == [1.5, 2.5]
    assert got.columns["site"].to_list() == ["", ""] and got.columns["x?"].tolist() == [0, 0]
    assert [(n, column_type(c)) for n, c in got.columns.items()] == PINNED


def test_a_batch_with_every_pinned_column_in_order_is_itself() -> None:
    whole = batch(id=np.array([1]), site=VarColumn.from_values(["a"]), x=np.array([0.5]),
                  **{"x?": np.array([False])})  # fmt: skip
    assert filled(whole, PINNED) is whole


def test_a_new_column_or_another_type_is_refused() -> None:
    assert filled(batch(id=np.array([1]), y=np.array([2])), PINNED) is None
    assert filled(batch(id=np.array([1], np.int32)), PINNED) is None


def test_a_row_id_column_named_apart_follows_the_pinned_ones() -> None:
    got = filled(batch(__rid=np.array([4]), id=np.array([1])), PINNED, "__rid")
    assert got is not None and list(got.columns) == ["id", "site", "x", "x?", "__rid"]


def test_zeros_of_each_kind() -> None:
    assert zeros("bytes", 3).to_list() == [b"", b"", b""]
    assert zeros("<i4", 2).dtype == np.int32
