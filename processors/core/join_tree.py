"""Join trees: a query's streams joined by a tree of two-way symmetric window joins instead of
one MJoin (the plans of Ayad & Naughton, Sect. 2 and Fig. 3).

A tree is nested pairs of stream names. Users write it as text, ``(a, b), c`` (CQL's
``join_tree`` setting; parentheses group, a comma joins two subtrees), or in Python as nested
lists (``[["a", "b"], "c"]``). :func:`tree_text` writes the text back; EXPLAIN prints it for
each binary plan so that the plan it chose can be run as written.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Union

JoinTree = Union[str, tuple["JoinTree", "JoinTree"]]  # noqa: UP007 (a recursive alias)


class JoinTreeError(ValueError):
    """A join tree that cannot be read, or does not join the query's streams each once."""


_TOKEN = re.compile(r"\s*(?:([A-Za-z_][A-Za-z0-9_]*)|(\()|(\))|(,)|(\S))")


def parse_join_tree(spec: object) -> JoinTree:
    """A tree from text (``(a, b), c``) or nested two-element lists or tuples of names."""
    if isinstance(spec, str):
        return _Parser(spec).tree()
    if isinstance(spec, Sequence) and len(spec) == 2:
        return (parse_join_tree(spec[0]), parse_join_tree(spec[1]))
    raise JoinTreeError(
        f"join_tree(): {spec!r} is not a join tree: give text such as '(a, b), c' or nested "
        "pairs of stream names such as [['a', 'b'], 'c']"
    )


def leaves(tree: JoinTree) -> list[str]:
    """The stream names of ``tree``, left to right."""
    return [tree] if isinstance(tree, str) else [*leaves(tree[0]), *leaves(tree[1])]


def tree_text(tree: JoinTree) -> str:
    """The text :func:`parse_join_tree` reads back to ``tree``: ``(a, b), c``."""
    if isinstance(tree, str):
        return tree

    def side(t: JoinTree) -> str:
        return t if isinstance(t, str) else f"({tree_text(t)})"

    return f"{side(tree[0])}, {side(tree[1])}"


def unordered(tree: JoinTree) -> object:
    """``tree`` with the sides of each join unordered: equal for a tree and its mirror
    images (which compute the same joins)."""
    return tree if isinstance(tree, str) else frozenset({unordered(tree[0]), unordered(tree[1])})


def check_join_tree(tree: JoinTree, streams: Sequence[str]) -> None:
    """QueryError unless ``tree`` joins exactly ``streams``, each once."""
    names = leaves(tree)
    if len(streams) < 2:
        raise JoinTreeError("join_tree(): a join tree needs a query over two or more streams")
    unknown = sorted(set(names) - set(streams))
    twice = sorted({n for n in names if names.count(n) > 1})
    missing = [s for s in streams if s not in names]
    problems = [
        *([f"no stream named {', '.join(unknown)}"] if unknown else []),
        *([f"{', '.join(twice)} more than once"] if twice else []),
        *([f"{', '.join(missing)} missing"] if missing else []),
    ]
    if problems:
        raise JoinTreeError(
            f"join_tree(): {tree_text(tree)!r} must join each of the query's streams "
            f"({', '.join(streams)}) once: {'; '.join(problems)}"
        )


class _Parser:
    """tree := part [',' part]; part := name | '(' tree ')'."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, int]] = []
        for m in _TOKEN.finditer(text):
            if m.group(5):
                self._fail(m.start(5), f"unexpected {m.group(5)!r}")
            kind = "name" if m.group(1) else m.group(0).strip()
            self.tokens.append((kind if kind != "name" else m.group(1), m.start(m.lastindex or 0)))
        self.pos = 0

    def _fail(self, at: int, what: str) -> None:
        raise JoinTreeError(
            f"join_tree(): {what} at column {at + 1} of {self.text!r} (expected a tree such "
            "as '(a, b), c')"
        )

    def _peek(self) -> str | None:
        return self.tokens[self.pos][0] if self.pos < len(self.tokens) else None

    def _at(self) -> int:
        return self.tokens[self.pos][1] if self.pos < len(self.tokens) else len(self.text)

    def tree(self) -> JoinTree:
        t = self._pair()
        if self._peek() is not None:
            self._fail(self._at(), f"unexpected {self._peek()!r}")
        return t

    def _pair(self) -> JoinTree:
        left = self._part()
        if self._peek() != ",":
            return left
        self.pos += 1
        right = self._part()
        if self._peek() == ",":
            self._fail(self._at(), "a third subtree (each join has two sides: add parentheses)")
        return (left, right)

    def _part(self) -> JoinTree:
        tok = self._peek()
        if tok == "(":
            self.pos += 1
            inner = self._pair()
            if self._peek() != ")":
                self._fail(self._at(), "a missing ')'")
            self.pos += 1
            return inner
        if tok is None or tok in {")", ","}:
            self._fail(
                self._at(), "a missing stream name" if tok is None else f"unexpected {tok!r}"
            )
        self.pos += 1
        assert tok is not None
        return tok
