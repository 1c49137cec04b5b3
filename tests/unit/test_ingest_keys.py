"""Kafka keys through ingest: keyed records keep their keys, unkeyed ones stay unkeyed."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from processors.core.batch import Batch
from processors.runtime.ingest import with_keys


@given(st.lists(st.one_of(st.none(), st.binary(max_size=5)), max_size=40))
def test_with_keys_keeps_order_and_every_key(keys: list[bytes | None]) -> None:
    batch = Batch.inserts({"a": np.arange(len(keys), dtype=np.int64)})
    parts = with_keys(batch, keys)
    got_values = [v for p in parts for v in p.columns["a"].tolist()]
    got_keys = [k for p in parts for k in (p.key.to_list() if p.key else [None] * len(p))]
    assert got_values == list(range(len(keys)))
    assert got_keys == keys
    if keys:
        assert all(len(p) for p in parts)
        # parts alternate between keyed and unkeyed runs: no two neighbours of the same kind
        kinds = [p.key is not None for p in parts]
        assert all(a != b for a, b in zip(kinds, kinds[1:], strict=False))
