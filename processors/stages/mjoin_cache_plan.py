"""Where an MJoin's subresult caches sit: specs, checks and their resolution against the
stage's pipelines (A-Caching, Babu et al., Sections 3.2 and 6).

A cache covers positions ``start..end`` of pipeline i's drop-probing order (the segment X).
Its key is the equivalence classes that link X to the inputs before it (the root and the
earlier positions: K_ijk of Section 3.2). Its *maintaining set* M is the input set whose
pipelines compute its changes at their update point, after their first |M| - 1 probes:

- a prefix-invariant cache (Definition 3.2) has M = X;
- a globally-consistent cache (Section 6) caches X whose inputs do not satisfy the prefix
  invariant, with M the smallest superset of X that does
  (:func:`processors.core.caching.candidates.smallest_invariant_superset`): X's combinations
  that join the rest of M. M may not hold the pipeline's own input (Definition 6.1's lower
  bound ranges over the other inputs only; see docs/caching.md).

The runtime side is :mod:`processors.stages.mjoin_caches`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from processors.core.caching.candidates import (
    Orders,
    orders_of,
    prefix_invariant,
    smallest_invariant_superset,
)
from processors.stages.join_cache import SubresultCache

if TYPE_CHECKING:
    from processors.stages.mjoin_stage import MJoinStage

DEFAULT_BUCKETS = 4096
Consistency = Literal["prefix", "global"]


@dataclass(frozen=True)
class CacheSpec:
    """A cache on positions ``start..end`` (inclusive) of pipeline ``pipeline``'s order,
    prefix-invariant or globally consistent, with ``buckets`` entries at most."""

    pipeline: int
    start: int
    end: int
    buckets: int = DEFAULT_BUCKETS
    consistency: Consistency = "prefix"


@dataclass
class Placed:
    """A cache in use: its segment, key and maintaining set, resolved against the pipelines."""

    spec: CacheSpec
    name: str
    rels: tuple[int, ...]  # the segment's inputs, sorted: the columns of a combination
    entities: tuple[int, ...]  # pipeline i's entities of the segment, in probing order
    prefix: frozenset[int]  # pipeline i's entities before the segment
    classes: tuple[int, ...]  # the key's equivalence classes
    probe_keys: tuple[tuple[int, str], ...]  # per class: pipeline i's (entity | -1, column)
    update_keys: tuple[tuple[int, str], ...]  # per class: (index into rels, column)
    maintained: frozenset[int]  # M: the inputs whose pipelines feed it
    orders: dict[int, tuple[int, ...]]  # the orders it was checked against, by pipeline
    cache: SubresultCache
    pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)

    @property
    def update_at(self) -> int:
        """The update point of a maintaining pipeline: before its probe number |M| - 1."""
        return len(self.maintained) - 1

    @property
    def is_global(self) -> bool:
        return self.maintained != frozenset(self.rels)


def stage_orders(stage: MJoinStage) -> Orders:
    """Each pipeline's order as input indices."""
    return orders_of(stage.pipelines, [r.order.tolist() for r in stage.reopts])


def spec_of(stage: MJoinStage, s: Any) -> CacheSpec:
    """A CacheSpec from a CacheSpec, a tuple (pipeline index or input name, start, end[,
    buckets[, consistency]]) or anything with ``pipeline``, ``start``, ``end`` and ``kind``
    (a Candidate of :mod:`processors.core.caching.candidates`)."""
    if isinstance(s, tuple):
        first = stage.input_index(s[0]) if isinstance(s[0], str) else int(s[0])
        s = CacheSpec(first, *(int(x) for x in s[1:4]), *s[4:5])
    elif not isinstance(s, CacheSpec):
        s = CacheSpec(int(s.pipeline), int(s.start), int(s.end),
                      consistency=getattr(s, "kind", "prefix"))  # fmt: skip
    if s.consistency not in ("prefix", "global"):
        raise ValueError(f"{stage.name}: consistency {s.consistency!r}, not prefix or global")
    if not 0 <= s.pipeline < stage.n:
        raise ValueError(f"{stage.name}: no pipeline {s.pipeline}")
    size = stage.pipelines[s.pipeline].size
    if not 0 <= s.start <= s.end < size:
        raise ValueError(f"{stage.name}: positions {s.start}..{s.end} outside 0..{size - 1}")
    return s


def prefix_invariant_violation(orders: Orders, i: int, start: int, end: int) -> str | None:
    """Why the segment ``start..end`` of pipeline i breaks the prefix invariant (Definition
    3.2; :func:`processors.core.caching.candidates.prefix_invariant`), or None. ``orders[x]``:
    pipeline x's order as input indices."""
    segment = frozenset(orders[i][start : end + 1])
    if prefix_invariant(segment, orders):
        return None
    size = len(segment) - 1
    x = next(x for x in sorted(segment) if frozenset(orders[x][:size]) != segment - {x})
    return (
        f"pipeline {x} probes {list(orders[x][:size])} first, not the other segment inputs "
        f"{sorted(segment - {x})}"
    )


def maintaining_set(orders: Orders, s: CacheSpec) -> tuple[frozenset[int] | None, str]:
    """M for the cache ``s`` under ``orders``, or None and why it cannot run."""
    segment = frozenset(orders[s.pipeline][s.start : s.end + 1])
    if s.consistency == "prefix":
        why = prefix_invariant_violation(orders, s.pipeline, s.start, s.end)
        return (None, f"breaks the prefix invariant: {why}") if why else (segment, "")
    found = smallest_invariant_superset(segment, orders)
    if s.pipeline in found:
        return None, (
            f"its smallest prefix-invariant superset {sorted(found)} holds the pipeline's own "
            "input (Definition 6.1's lower bound would not hold)"
        )
    return found, ""


def resolve(stage: MJoinStage, s: CacheSpec) -> Placed:
    """The cache ``s`` placed in the stage's current orders (ValueError if it cannot run)."""
    maintained, why = maintaining_set(stage_orders(stage), s)
    if maintained is None:
        raise ValueError(f"{stage.name}: cache on {segment_name(stage, s)} {why}")
    pipe = stage.pipelines[s.pipeline]
    order = stage.reopts[s.pipeline].order.tolist()
    entities = tuple(order[s.start : s.end + 1])
    prefix = frozenset(order[: s.start])
    rels = tuple(sorted(pipe.inputs[e] for e in entities))
    before = {s.pipeline} | {pipe.inputs[e] for e in prefix}
    classes = tuple(
        k for k, members in enumerate(stage.graph.members)
        if any(x in before for x, _ in members) and any(x in rels for x, _ in members)
    )  # fmt: skip
    probe_keys, update_keys = [], []
    for k in classes:
        members = stage.graph.members[k]
        sources = [(-1, c) for x, c in members if x == s.pipeline] + [
            (e, c) for e in sorted(prefix) if not pipe.existence_only[e]
            for x, c in members if x == pipe.inputs[e]
        ]  # fmt: skip
        probe_keys.append(sources[0])  # an existence-only one's parent is in its class
        update_keys.append(next((rels.index(x), c) for x, c in members if x in rels))
    return Placed(
        s, segment_name(stage, s), rels, entities, prefix, classes, tuple(probe_keys),
        tuple(update_keys), maintained,
        {x: tuple(stage.reopts[x].order.tolist()) for x in {s.pipeline, *maintained}},
        SubresultCache(len(rels), len(classes), s.buckets),
    )  # fmt: skip


def share(placed: Sequence[Placed]) -> list[Placed]:
    """Caches that hold the same entries (the same inputs, key classes and maintaining set, in
    any pipeline: Definition 4.1's shared caches, Section 6's alike) use the first one's table:
    stored and updated once, and an entry made by one pipeline's miss serves the others."""
    tables: dict[tuple[Any, ...], SubresultCache] = {}
    for c in placed:
        c.cache = tables.setdefault((c.rels, c.classes, c.maintained), c.cache)
    return list(placed)


def index(
    placed: Sequence[Placed],
) -> tuple[dict[tuple[int, int], Placed], dict[tuple[int, int], list[Placed]]]:
    """The lookup points and update points by (pipeline, position); ValueError if two caches
    of a pipeline overlap or an update point falls inside a cached segment."""
    for a in placed:
        for b in placed:
            same = a is not b and a.spec.pipeline == b.spec.pipeline
            if same and a.spec.start <= b.spec.end and b.spec.start <= a.spec.end:
                raise ValueError(f"caches {a.name} and {b.name} overlap")
    segments = {(c.spec.pipeline, c.spec.start): c for c in placed}
    feeds: dict[tuple[int, int], list[Placed]] = {}
    for c in placed:
        for x in sorted(c.maintained):
            inside = [d for d in placed if d.spec.pipeline == x
                      and d.spec.start < c.update_at <= d.spec.end]  # fmt: skip
            if inside:
                raise ValueError(f"the changes of {c.name} are inside cache {inside[0].name}")
            fed = feeds.setdefault((x, c.update_at), [])
            if not any(d.cache is c.cache for d in fed):  # a shared table is updated once
                fed.append(c)
    return segments, feeds


def still_valid(stage: MJoinStage, c: Placed, now: dict[int, tuple[int, ...]]) -> str | None:
    """Why cache ``c`` must go under the orders ``now`` of its watched pipelines, or None."""
    i = c.spec.pipeline
    if now[i] != c.orders[i]:
        return f"join order of {stage.names[i]} changed"
    maintained, why = maintaining_set(stage_orders(stage), c.spec)
    if maintained is None:
        return why
    if maintained != c.maintained:
        return f"its maintaining set became {sorted(maintained)}"
    return None


def segment_name(stage: MJoinStage, s: CacheSpec) -> str:
    order = stage_orders(stage)[s.pipeline]
    names = [stage.names[x] for x in order[s.start : s.end + 1]]
    tail = "g" if s.consistency == "global" else ""
    return f"{stage.names[s.pipeline]}:{s.start}-{s.end}[{','.join(names)}]{tail}"
