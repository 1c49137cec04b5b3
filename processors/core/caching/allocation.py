"""Memory for the selected caches (Babu et al., ICDE 2005, Sect. 5).

Caches are selected as if memory were unlimited; then memory goes to them greedily by priority
(net benefit per expected byte), and a cache that does not fit in what is left is not used.
A shared group (Def. 4.1) is one physical cache serving several pipelines: it is allocated as
one item, its net benefit the sum of its used members' benefits minus its cost once, its memory
the sum of their expected memories (their probe streams may share keys, so this is an upper
bound).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from processors.core.caching.candidates import Candidate
from processors.core.caching.model import CacheEstimate, priority


@dataclass(frozen=True)
class Allocation:
    """Items granted memory, in priority order; items refused (no net benefit, or too big for
    what was left when their turn came); the bytes granted."""

    granted: tuple[int, ...]
    refused: tuple[int, ...]
    used_bytes: float


def allocate(nets: Sequence[float], memory: Sequence[float], budget: float) -> Allocation:
    """Sect. 5's greedy: by decreasing priority (ties by index), grant an item its memory if it
    fits in what is left, else skip it; items without net benefit get nothing."""
    if len(nets) != len(memory):
        raise ValueError("one memory estimate per item")
    order = sorted(range(len(nets)), key=lambda k: (-priority(nets[k], memory[k]), k))
    left = float(budget)
    granted, refused = [], []
    for k in order:
        if nets[k] > 0 and memory[k] <= left:
            granted.append(k)
            left -= memory[k]
        else:
            refused.append(k)
    return Allocation(tuple(granted), tuple(sorted(refused)), float(budget) - left)


@dataclass(frozen=True)
class PhysicalCache:
    """One stored cache: the chosen candidates (indices) it serves, its net benefit and
    expected bytes."""

    members: tuple[int, ...]
    net: float
    memory: float


def physical_caches(
    cands: Sequence[Candidate], chosen: Sequence[int], estimates: Sequence[CacheEstimate]
) -> list[PhysicalCache]:
    """The chosen candidates grouped into stored caches by their share key."""
    by_key: dict[object, list[int]] = {}
    for k in chosen:
        by_key.setdefault(cands[k].share_key, []).append(k)
    return [
        PhysicalCache(
            members=tuple(ks),
            net=sum(estimates[k].benefit for k in ks) - max(estimates[k].cost for k in ks),
            memory=sum(estimates[k].memory for k in ks),
        )
        for ks in by_key.values()
    ]


def allocate_caches(
    cands: Sequence[Candidate],
    chosen: Sequence[int],
    estimates: Sequence[CacheEstimate],
    budget: float,
) -> tuple[tuple[int, ...], tuple[int, ...], float]:
    """(the chosen candidates that get memory, those that do not, bytes granted)."""
    phys = physical_caches(cands, chosen, estimates)
    a = allocate([p.net for p in phys], [p.memory for p in phys], budget)
    kept = tuple(sorted(k for x in a.granted for k in phys[x].members))
    dropped = tuple(sorted(k for x in a.refused for k in phys[x].members))
    return kept, dropped, a.used_bytes
