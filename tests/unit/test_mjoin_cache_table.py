"""SubresultCache: Section 3.2's create / probe / insert / delete, direct-mapped replacement
(Section 3.3), lifetimes and invalid references, on hand-made slot combinations."""

from __future__ import annotations

import numpy as np
import pytest

from processors.stages.join_cache import SubresultCache

ALIVE = np.iinfo(np.int64).max


def arr(*rows: tuple[int, ...]) -> np.ndarray:
    return np.array(rows, np.int64).reshape(len(rows), -1)


class Windows:
    """Two relations' ``born``/``died`` arrays of 8 slots, every slot born at 1 and alive."""

    def __init__(self) -> None:
        self.born = (np.ones(8, np.int64), np.ones(8, np.int64))
        self.died = (np.full(8, ALIVE, np.int64), np.full(8, ALIVE, np.int64))


def probe(cache: SubresultCache, w: Windows, keys: np.ndarray, gen: int, epoch: int = 1,
          fresh_below: int = ALIVE) -> list[list[tuple[int, ...]]]:  # fmt: skip
    """The combinations each key row gets (sorted), or None for a miss."""
    g = np.full(len(keys), gen, np.int64)
    buckets = cache.lookup(keys, g, epoch, fresh_below)
    left, slots = cache.expand(buckets, g, w.born, w.died)
    out: list = [None if b < 0 else [] for b in buckets]
    for r, s in zip(left.tolist(), slots.T.tolist(), strict=True):
        out[r].append(tuple(s))
    return [x if x is None else sorted(x) for x in out]


def borns(w: Windows, slots: np.ndarray) -> np.ndarray:
    return np.stack([w.born[k][slots[:, k]] for k in range(slots.shape[1])], axis=1)


def test_create_probe_insert_delete() -> None:
    w = Windows()
    cache = SubresultCache(2, 1, 64)
    slots = arr((0, 1), (2, 3), (4, 5))
    cache.create(arr((7,), (8,)), np.array([0, 2, 3]), slots, borns(w, slots), epoch=1)
    assert probe(cache, w, arr((7,), (8,), (9,)), gen=5) == [[(0, 1), (2, 3)], [(4, 5)], None]
    assert (cache.hits, cache.misses, cache.entries, cache.combinations) == (2, 1, 2, 3)
    new = arr((6, 7), (6, 6))
    # inserts: into 7's entry (made in an earlier epoch); 9 has none: ignored
    assert cache.insert(arr((7,), (9,)), new, borns(w, new), epoch=2) == 1
    assert probe(cache, w, arr((7,)), gen=5, epoch=2) == [[(0, 1), (2, 3), (6, 7)]]
    # deletes: present ones leave, absent keys and combinations are ignored
    gone = arr((2, 3), (6, 6), (4, 5))
    assert cache.delete(arr((7,), (7,), (9,)), gone, borns(w, gone)) == 1
    assert probe(cache, w, arr((7,), (8,)), gen=5, epoch=2) == [[(0, 1), (6, 7)], [(4, 5)]]
    assert cache.combinations == 3


def test_an_entry_of_this_epoch_takes_no_inserts() -> None:
    """It was computed from windows that already held this epoch's inserts."""
    w = Windows()
    cache = SubresultCache(1, 1, 64)
    cache.create(arr((1,)), np.array([0, 1]), arr((0,)), arr((1,)), epoch=3)
    assert cache.insert(arr((1,)), arr((5,)), arr((1,)), epoch=3) == 0
    assert cache.insert(arr((1,)), arr((5,)), arr((1,)), epoch=4) == 1
    assert probe(cache, w, arr((1,)), gen=9, epoch=4) == [[(0,), (5,)]]


def test_an_older_entry_answers_only_below_fresh_below() -> None:
    w = Windows()
    cache = SubresultCache(1, 1, 64)
    cache.create(arr((1,)), np.array([0, 1]), arr((0,)), arr((1,)), epoch=1)
    assert probe(cache, w, arr((1,)), gen=10, epoch=2, fresh_below=10) == [None]
    assert cache.outdated == 1
    assert probe(cache, w, arr((1,)), gen=9, epoch=2, fresh_below=10) == [[(0,)]]
    assert probe(cache, w, arr((1,)), gen=10, epoch=1, fresh_below=10) == [[(0,)]]


def test_a_new_key_replaces_the_entry_in_its_bucket() -> None:
    """Direct-mapped (Section 3.3): one bucket, the last key created wins."""
    w = Windows()
    cache = SubresultCache(1, 2, 1)
    cache.create(arr((1, 2)), np.array([0, 2]), arr((0,), (1,)), arr((1,), (1,)), epoch=1)
    cache.create(arr((1, 3)), np.array([0, 1]), arr((2,)), arr((1,)), epoch=1)
    assert probe(cache, w, arr((1, 2), (1, 3)), gen=5) == [None, [(2,)]]
    assert (cache.entries, cache.combinations) == (1, 1)
    # the replaced combinations went back to the pool: creating again reuses them
    size = len(cache.cnext)
    cache.create(arr((1, 2)), np.array([0, 2]), arr((0,), (1,)), arr((1,), (1,)), epoch=1)
    assert len(cache.cnext) == size and cache.combinations == 2


def test_probes_see_only_combinations_alive_at_their_number() -> None:
    w = Windows()
    w.born[0][3] = 6  # slot 3 of relation 0 born at 6
    w.died[1][4] = 8  # slot 4 of relation 1 dies at 8
    cache = SubresultCache(2, 1, 64)
    slots = arr((3, 0), (0, 4), (0, 0))
    cache.create(arr((1,)), np.array([0, 3]), slots, borns(w, slots), epoch=1)
    assert probe(cache, w, arr((1,)), gen=5) == [[(0, 0), (0, 4)]]
    assert probe(cache, w, arr((1,)), gen=7) == [[(0, 0), (0, 4), (3, 0)]]
    assert probe(cache, w, arr((1,)), gen=9) == [[(0, 0), (3, 0)]]


def test_references_to_freed_or_reused_slots_are_skipped_and_unlinked() -> None:
    w = Windows()
    cache = SubresultCache(2, 1, 64)
    slots = arr((1, 1), (2, 2), (3, 3))
    cache.create(arr((1,)), np.array([0, 3]), slots, borns(w, slots), epoch=1)
    w.born[0][1] = ALIVE  # freed
    w.born[1][2] = 12  # reused by a later tuple
    assert cache.invalid_refs(w.born) == 2
    assert probe(cache, w, arr((1,)), gen=20) == [[(3, 3)]]
    assert (cache.unlinked, cache.combinations, cache.invalid_refs(w.born)) == (2, 1, 0)


def test_the_pool_grows_and_clear_empties() -> None:
    w = Windows()
    cache = SubresultCache(1, 1, 1024)
    rng = np.random.default_rng(0)
    keys = np.arange(500, dtype=np.int64).reshape(-1, 1)
    counts = rng.integers(0, 5, 500)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    slots = rng.integers(0, 8, (int(starts[-1]), 1)).astype(np.int64)
    cache.create(keys, starts, slots, np.ones_like(slots), epoch=1)
    assert cache.combinations <= int(starts[-1])  # some keys share a bucket: replaced
    got = probe(cache, w, keys, gen=3)
    hit = [r for r, x in enumerate(got) if x is not None]
    assert len(hit) == cache.entries
    for r in hit:
        assert got[r] == sorted(tuple(s) for s in slots[starts[r] : starts[r + 1]].tolist())
    assert cache.stats()["bytes"] == cache.nbytes > 0
    cache.clear()
    assert (cache.entries, cache.combinations) == (0, 0)
    assert probe(cache, w, keys[:3], gen=3) == [None, None, None]


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="power of two"):
        SubresultCache(1, 1, 3)
    with pytest.raises(ValueError, match="width"):
        SubresultCache(0, 1, 4)
