"""Query trees over several streams, split into operator paths (Babcock et al., Sect. 4.3).

A query is a tree of named operators whose leaves are input streams. It is broken into one path
per leaf, from the stream to the root; paths share their common tail (Sect. 4.3.1). A
tuple-based sliding-window join is an operator on every path through it, with one (time,
selectivity) derived from the input rates, the semijoin selectivities and the per-tuple times
(Sect. 4.3.1, after Kang et al.); rates of intermediate streams follow inductively.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Real

from processors.core.scheduling.plan import SchedulingPlan
from processors.core.scheduling.progress import ratio


@dataclass(frozen=True)
class Stream:
    """An input stream (a leaf): ``rate`` tuples per time unit (lambda, by timestamp)."""

    name: str
    rate: float = 1.0


@dataclass(frozen=True)
class WindowJoin:
    """A sliding-window join's per-input figures, in the order of its node's inputs:
    ``alphas[i]``, the average number of tuples in the other input's window that a tuple of
    input i joins with (for R: alpha_W(S)); ``times[i]``, the average time to process one tuple
    of input i (head comparison, probe, window update)."""

    alphas: tuple[float, ...]
    times: tuple[float, ...]


@dataclass(frozen=True)
class OpNode:
    """An operator: ``t`` time per tuple it receives and ``s`` selectivity, or ``join`` for a
    sliding-window join (t and s then derived from its inputs' rates)."""

    name: str
    t: float | None = None
    s: float | None = None
    inputs: tuple[OpNode | Stream, ...] = ()
    join: WindowJoin | None = None


def _positive(value: object, what: str, allow_zero: bool = False) -> float:
    if not isinstance(value, Real) or isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{what} must be {'>= 0' if allow_zero else 'positive'}, got {value!r}")
    return value


def window_join_stats(
    rate_r: float, rate_s: float, alpha_ws: float, alpha_wr: float, t_r: float, t_s: float
) -> tuple[float, float]:
    """(t, s) of a sliding-window join of R and S (Sect. 4.3.1): over a timestamp interval it
    processes lambda_R + lambda_S tuples in lambda_R t_R + lambda_S t_S time and produces
    lambda_R alpha_W(S) + lambda_S alpha_W(R) results."""
    return join_stats((rate_r, rate_s), (alpha_ws, alpha_wr), (t_r, t_s))


def join_stats(
    rates: Sequence[float], alphas: Sequence[float], times: Sequence[float]
) -> tuple[float, float]:
    """The same for any number of inputs: rate-weighted mean time and result tuples per input
    tuple."""
    if not (len(rates) == len(alphas) == len(times)) or len(rates) < 2:
        raise ValueError(
            f"a join needs one rate, alpha and time per input (at least two), got "
            f"{len(rates)}, {len(alphas)}, {len(times)}"
        )
    for i, (lam, a, t) in enumerate(zip(rates, alphas, times, strict=True)):
        _positive(lam, f"input {i} rate", allow_zero=True)
        _positive(a, f"input {i} semijoin selectivity", allow_zero=True)
        _positive(t, f"input {i} per-tuple time")
    total = sum(rates)
    if total <= 0:
        raise ValueError("a join's input rates are all zero: its (t, s) is undefined")
    t = ratio(sum(lam * x for lam, x in zip(rates, times, strict=True)), total)
    s = ratio(sum(lam * a for lam, a in zip(rates, alphas, strict=True)), total)
    return t, s


def _check_tree(node: OpNode | Stream, seen: dict[str, OpNode | Stream]) -> None:
    if node.name in seen and seen[node.name] is not node:
        raise ValueError(f"two different nodes are named {node.name!r}")
    seen[node.name] = node
    if isinstance(node, Stream):
        _positive(node.rate, f"stream {node.name!r} rate", allow_zero=True)
        return
    if not node.inputs:
        raise ValueError(f"operator {node.name!r} has no inputs; leaves must be Streams")
    if node.join is not None:
        n = len(node.inputs)
        if n < 2 or len(node.join.alphas) != n or len(node.join.times) != n:
            raise ValueError(
                f"join {node.name!r} has {n} inputs, {len(node.join.alphas)} alphas and "
                f"{len(node.join.times)} times; it needs one of each per input (at least two)"
            )
    else:
        _positive(node.t, f"operator {node.name!r} time")
        _positive(node.s, f"operator {node.name!r} selectivity", allow_zero=True)
    for child in node.inputs:
        _check_tree(child, seen)


def stats_and_rates(
    root: OpNode,
) -> tuple[dict[str, tuple[float, float]], dict[str, float]]:
    """Per operator (t, s), and per node its output rate, derived bottom-up: an operator's
    output rate is its inputs' total rate times its selectivity (Sect. 4.3.1)."""
    _check_tree(root, {})
    stats: dict[str, tuple[float, float]] = {}
    rates: dict[str, float] = {}

    def visit(node: OpNode | Stream) -> float:
        if node.name in rates:
            return rates[node.name]
        if isinstance(node, Stream):
            rates[node.name] = node.rate
            return node.rate
        ins = [visit(child) for child in node.inputs]
        if node.join is not None:
            t, s = join_stats(ins, node.join.alphas, node.join.times)
        else:
            t, s = node.t, node.s
        stats[node.name] = (t, s)
        rates[node.name] = sum(ins) * s
        return rates[node.name]

    visit(root)
    return stats, rates


def split_paths(root: OpNode) -> dict[str, list[str]]:
    """One path per input stream, named after it: the operators from the stream to the root
    (Sect. 4.3.1, Fig. 3: R -> pi -> join -> sigma and S -> join -> sigma)."""
    _check_tree(root, {})
    out: dict[str, list[str]] = {}

    def walk(node: OpNode | Stream, above: list[str]) -> None:
        if isinstance(node, Stream):
            if node.name in out:
                raise ValueError(
                    f"stream {node.name!r} feeds the query twice; give each copy its own name"
                )
            out[node.name] = list(reversed(above))
            return
        for child in node.inputs:
            walk(child, [*above, node.name])

    walk(root, [])
    return out


def query_plan(
    queries: Mapping[str, OpNode],
    latency_threshold: Mapping[str, float] | None = None,
) -> SchedulingPlan:
    """A scheduling plan of several query trees: paths are named ``"query/stream"``; operator
    names must be unique across queries (every stream feeds one query, Sect. 2)."""
    paths: dict[str, list[str]] = {}
    stats: dict[str, tuple[float, float]] = {}
    query_of: dict[str, str] = {}
    owner: dict[str, str] = {}
    for qname, root in queries.items():
        if not isinstance(root, OpNode):
            raise ValueError(f"query {qname!r}: the root must be an OpNode, got {root!r}")
        q_stats, _ = stats_and_rates(root)
        for op in q_stats:
            if op in owner:
                raise ValueError(f"operator {op!r} appears in queries {owner[op]!r} and {qname!r}")
            owner[op] = qname
        stats.update(q_stats)
        for stream, ops in split_paths(root).items():
            path = f"{qname}/{stream}"
            paths[path] = ops
            query_of[path] = qname
    plan = SchedulingPlan(
        paths=paths,
        stats=stats,
        query_of=query_of,
        latency_threshold=dict(latency_threshold or {}),
    )
    plan.validate()
    return plan
