"""Shared fixtures of the A-Caching tests: Fig. 5(a)'s pipelines and equijoins on one
attribute (Babu et al., ICDE 2005)."""

from __future__ import annotations

from hypothesis import strategies as st

from processors.core.joins.graph import JoinGraph

R = {f"R{k}": k - 1 for k in range(1, 7)}  # R1..R6 are inputs 0..5


def equijoin(n: int) -> JoinGraph:
    """R1(A) ⋈_A ... ⋈_A Rn(A): one equivalence class."""
    return JoinGraph(n, [((k, "a"), (k + 1, "a")) for k in range(n - 1)])


def pipelines(*orders: str) -> list[tuple[int, ...]]:
    return [tuple(R[r] for r in o.split()) for o in orders]


# Fig. 5(a), reconstructed from Examples 4.1 and 4.2: the sets with the prefix property are
# {R1,R2}, {R4,R5}, {R1,R2,R3} and {R1..R5}; ΔR4's pipeline has two candidates (R1R2 inside
# R1R2R3), ΔR6's three; R1R2 is a segment of ΔR3, ΔR4 and ΔR6 only, R1R2R3 of ΔR4 and ΔR5 only.
FIG5 = pipelines(
    "R2 R3 R4 R5 R6",  # ΔR1: R1R2R3 needs R2,R3 first; R1..R5 needs R6 last
    "R1 R3 R4 R5 R6",  # ΔR2
    "R1 R2 R4 R5 R6",  # ΔR3
    "R5 R1 R2 R3 R6",  # ΔR4: R4R5 needs R5 first
    "R4 R1 R3 R2 R6",  # ΔR5: R1R2R3 contiguous but not R1R2
    "R1 R2 R4 R5 R3",  # ΔR6: R1R2 and R4R5, not R1R2R3
)


def names(*rs: str) -> frozenset[int]:
    return frozenset(R[r] for r in rs)


def _split(draw: st.DrawFn, inputs: list[int]) -> object:
    """A random binary tree over ``inputs`` (a leaf is an int, a node a pair)."""
    if len(inputs) == 1:
        return inputs[0]
    cut = draw(st.integers(1, len(inputs) - 1))
    return (_split(draw, inputs[:cut]), _split(draw, inputs[cut:]))


def _leaves(draw: st.DrawFn, node: object) -> list[int]:
    if isinstance(node, int):
        return [node]
    a, b = node
    if draw(st.booleans()):
        a, b = b, a
    return _leaves(draw, a) + _leaves(draw, b)


def _tree_order(draw: st.DrawFn, node: object, r: int) -> list[int]:
    """Pipeline of r in a tree of MJoins: each ancestor's other subtree, inner ones first, so
    every subtree satisfies the prefix invariant (a structure rich in candidates, as Fig. 5)."""
    if isinstance(node, int):
        return []
    a, b = node
    inside, other = (a, b) if r in _leaves(draw, a) else (b, a)
    return _tree_order(draw, inside, r) + _leaves(draw, other)


@st.composite
def random_orders(draw: st.DrawFn, n: int) -> list[tuple[int, ...]]:
    """Tree-shaped orders, some pipelines then shuffled (fewer candidates), or fully random."""
    if draw(st.integers(0, 3)) == 0:
        return [tuple(draw(st.permutations([r for r in range(n) if r != i]))) for i in range(n)]
    tree = _split(draw, draw(st.permutations(list(range(n)))))
    orders = [tuple(_tree_order(draw, tree, i)) for i in range(n)]
    for i in range(n):
        if draw(st.integers(0, 4)) == 0:
            orders[i] = tuple(draw(st.permutations(list(orders[i]))))
    return orders
