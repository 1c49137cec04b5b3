"""The scanned join column (processors/kernels/scan_index.py) against the hash multi-map it
stands in for: the same matches under the lifetime rule, whatever the keys and lifetimes."""

from __future__ import annotations

import numpy as np
import pytest

from processors.kernels.multimap import MultiMap
from processors.kernels.scan_index import ScanIndex
from processors.stages.join_store import ALIVE, WindowStore


@pytest.mark.parametrize("seed", range(20))
def test_scanning_finds_what_the_multimap_finds(seed: int) -> None:
    rng = np.random.default_rng(seed)
    cap = int(rng.integers(1, 200))
    live = np.flatnonzero(rng.random(cap) < 0.7)  # the other slots are free
    keys = rng.integers(0, 6, cap).astype(np.int64)
    born = np.zeros(cap, np.int64)  # (a slot never used has born 0)
    died = np.full(cap, ALIVE, np.int64)
    born[live] = rng.integers(0, 50, len(live))
    dead = live[rng.random(len(live)) < 0.4]
    died[dead] = born[dead] + rng.integers(1, 30, len(dead))
    mm, scan = MultiMap(cap), ScanIndex(cap)
    for index in (mm, scan):
        index.insert(keys[live], live)
    probe = rng.integers(-1, 7, int(rng.integers(0, 300))).astype(np.int64)
    gen = rng.integers(0, 80, len(probe)).astype(np.int64)
    want = sorted(zip(*(a.tolist() for a in mm.expand(born, died, probe, gen)), strict=True))
    got = list(zip(*(a.tolist() for a in scan.expand(born, died, probe, gen)), strict=True))
    assert got == sorted(got) and got == want  # in order of probe, then of slot
    assert scan.exists(born, died, probe, gen).tolist() == (
        mm.exists(born, died, probe, gen).tolist()
    )


def test_a_store_scans_a_join_column_only_when_asked_before_its_first_tuple() -> None:
    store = WindowStore("s", ["a", "b"])
    store.scan("b")
    assert isinstance(store.indexes["b"], ScanIndex)
    assert isinstance(store.indexes["a"], MultiMap)
    with pytest.raises(ValueError, match="'c' is not a join column"):
        store.scan("c")
