"""streamon's sqlglot dialect: SQL with CQL's stream parts (Arasu, Babu and Widom's CQL).

sqlglot parses the SQL: expressions, the FROM list, WHERE, GROUP BY, CREATE ... (cols) WITH
(...), with line and column on every error. What CQL adds is taken out of the token stream
before sqlglot sees it, and put back as metadata on the parsed statement
(``expression.meta["cql"]``, a :class:`Statement`):

- a window after a FROM item, ``S [ROWS n]``, ``[RANGE 10 MINUTES]``, ``[PARTITION BY k ROWS
  n]``, ``[NOW]``, ``[UNBOUNDED]``: by the start offset of the stream's name;
- ``SELECT ISTREAM | DSTREAM | RSTREAM ...`` (also ``ISTREAM(...)``);
- a trailing ``INTO 'topic' [PARTITIONS n]``; ``CREATE QUERY name INTO 'topic' AS SELECT ...``;
- ``CREATE STREAM`` (parsed as sqlglot's CREATE TABLE) and ``EXPLAIN``.

Only sqlglot's public surface is used (``Dialect``, ``Tokenizer.KEYWORDS``, ``Parser.parse``
and ``Token``); ``tests/unit/test_cql_parser.py`` pins what the pre-pass relies on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp, parser, tokens
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError
from sqlglot.tokens import Token, TokenType

from processors.cql.errors import CqlError, at_token

#: milliseconds per RANGE unit (singular and plural)
UNITS_MS = {
    "MILLISECOND": 1, "MS": 1, "SECOND": 1_000, "MINUTE": 60_000, "HOUR": 3_600_000,
    "DAY": 86_400_000,
}  # fmt: skip
STREAM_OPS = ("ISTREAM", "DSTREAM", "RSTREAM")
_CLAUSE_END = {
    TokenType.WHERE, TokenType.GROUP_BY, TokenType.HAVING, TokenType.ORDER_BY, TokenType.LIMIT,
    TokenType.INTO, TokenType.WINDOW, TokenType.UNION, TokenType.QUALIFY,
}  # fmt: skip
_WINDOW_HELP = "ROWS n, RANGE n <unit>, PARTITION BY columns ROWS n, NOW or UNBOUNDED"


@dataclass(frozen=True)
class WindowSpec:
    """A window as written: ``kind`` rows, range (``size`` in ms), now or unbounded."""

    kind: str
    size: int = 0
    partition_by: tuple[str, ...] = ()
    line: int = 0
    col: int = 0


@dataclass
class Statement:
    """What the pre-pass took out of one statement."""

    kind: str  # "stream", "query", "select"
    start: Token
    explain: bool = False
    name: str | None = None  # CREATE QUERY name
    into: str | None = None
    into_partitions: int | None = None
    stream_op: str | None = None
    op_token: Token | None = None
    windows: dict[int, WindowSpec] = field(default_factory=dict)  # by the name's start offset
    #: CREATE QUERY ... WITH (name = value, ...): how the query runs, each with its token
    settings: dict[str, tuple[Any, Token]] = field(default_factory=dict)


def _upper(tok: Token) -> str:
    return tok.text.upper()


def _positive_int(tok: Token, what: str) -> int:
    if tok.token_type != TokenType.NUMBER or not tok.text.isdigit() or int(tok.text) <= 0:
        raise at_token(tok, f"{what} must be a positive whole number")
    return int(tok.text)


def _window(inner: list[Token], opening: Token) -> WindowSpec:
    """The window between ``[`` and ``]``."""
    where = {"line": opening.line, "col": opening.col}
    if not inner:
        raise at_token(opening, f"empty window: expected {_WINDOW_HELP}")
    head = _upper(inner[0])
    if len(inner) == 1 and head in ("NOW", "UNBOUNDED"):
        return WindowSpec(head.lower(), **where)
    if inner[0].token_type == TokenType.ROWS:
        if len(inner) != 2:
            raise at_token(inner[-1], "expected ROWS n (one number) and ]")
        return WindowSpec("rows", _positive_int(inner[1], "ROWS n: n"), **where)
    if inner[0].token_type == TokenType.RANGE:
        if len(inner) != 3:
            raise at_token(inner[-1], "expected RANGE n <unit> and ], e.g. RANGE 10 MINUTES")
        size = _positive_int(inner[1], "RANGE n: n")
        unit = _upper(inner[2])
        unit = unit[:-1] if unit.endswith("S") and unit[:-1] in UNITS_MS else unit
        if unit not in UNITS_MS:
            raise at_token(inner[2], f"unknown time unit; expected one of {', '.join(UNITS_MS)}")
        return WindowSpec("range", size * UNITS_MS[unit], **where)
    if inner[0].token_type == TokenType.PARTITION_BY:
        cols, i = [], 1
        while i < len(inner) and inner[i].token_type != TokenType.ROWS:
            if inner[i].token_type not in (TokenType.VAR, TokenType.COMMA):
                raise at_token(inner[i], "expected column names, then ROWS n")
            if inner[i].token_type == TokenType.VAR:
                cols.append(inner[i].text)
            i += 1
        if not cols or i + 2 != len(inner):
            raise at_token(inner[min(i, len(inner) - 1)], "expected PARTITION BY columns ROWS n")
        size = _positive_int(inner[i + 1], "ROWS n: n")
        return WindowSpec("rows", size, tuple(cols), **where)
    raise at_token(inner[0], f"expected {_WINDOW_HELP}")


def _take_windows(toks: list[Token], st: Statement) -> list[Token]:
    """Remove ``[...]`` after FROM items, recording each by its stream name's offset."""
    out: list[Token] = []
    in_from, depth, i = False, 0, 0
    while i < len(toks):
        tok = toks[i]
        tt = tok.token_type
        if tt == TokenType.L_PAREN:
            depth += 1
        elif tt == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0 and tt == TokenType.FROM:
            in_from = True
        elif depth == 0 and tt in _CLAUSE_END:
            in_from = False
        if in_from and tt == TokenType.L_BRACKET and out and out[-1].token_type == TokenType.VAR:
            close = next((j for j in range(i + 1, len(toks))
                          if toks[j].token_type == TokenType.R_BRACKET), None)  # fmt: skip
            if close is None:
                raise at_token(tok, "window not closed: expected ]")
            st.windows[out[-1].start] = _window(toks[i + 1 : close], tok)
            i = close + 1
            continue
        out.append(tok)
        i += 1
    return out


def _into_clause(into: Token, rest: list[Token], st: Statement) -> None:
    """``'topic' [PARTITIONS n]`` after ``into``, to the end of ``rest``."""
    if not rest or rest[0].token_type != TokenType.STRING:
        raise at_token(rest[0] if rest else into, "expected INTO 'topic' (a quoted name)")
    st.into = rest[0].text
    if len(rest) > 1:
        if _upper(rest[1]) != "PARTITIONS" or len(rest) != 3:
            raise at_token(rest[1], "expected PARTITIONS n or the end of the INTO clause")
        st.into_partitions = _positive_int(rest[2], "PARTITIONS n: n")


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VALUES = {TokenType.NUMBER, TokenType.STRING, TokenType.TRUE, TokenType.FALSE}


def _settings(toks: list[Token]) -> dict[str, tuple[Any, Token]]:
    """``WITH ( name = value {, name = value} )``: numbers, 'strings', TRUE or FALSE."""
    if len(toks) < 2 or toks[1].token_type != TokenType.L_PAREN:
        raise at_token(toks[min(1, len(toks) - 1)], "expected WITH (setting = value, ...)")
    if toks[-1].token_type != TokenType.R_PAREN:
        raise at_token(toks[-1], "expected ) to close WITH (...), then AS SELECT ...")
    found: dict[str, tuple[Any, Token]] = {}
    body = toks[2:-1]
    for i in range(0, len(body), 4):
        part = body[i : i + 4]
        name, eq, value = (part + [None, None, None])[:3]  # type: ignore[list-item]
        if not _NAME.fullmatch(name.text):
            raise at_token(name, "expected a setting's name")
        if eq is None or eq.token_type != TokenType.EQ:
            raise at_token(eq or name, f"expected {name.text} = value")
        if value is None or value.token_type not in _VALUES:
            raise at_token(value or eq, "expected a number, a 'string', TRUE or FALSE")
        if len(part) == 4 and part[3].token_type != TokenType.COMMA:
            raise at_token(part[3], "expected , or )")
        if name.text.lower() in found:
            raise at_token(name, f"setting {name.text} is given twice")
        found[name.text.lower()] = (_value(value), name)
    return found


def _value(tok: Token) -> Any:
    if tok.token_type == TokenType.STRING:
        return tok.text
    if tok.token_type in (TokenType.TRUE, TokenType.FALSE):
        return tok.token_type == TokenType.TRUE
    return float(tok.text) if any(c in tok.text for c in ".eE") else int(tok.text)


def _take_into(toks: list[Token], st: Statement) -> list[Token]:
    """A trailing ``INTO 'topic' [PARTITIONS n]``."""
    depth, seen_from = 0, False
    for i, tok in enumerate(toks):
        if tok.token_type == TokenType.L_PAREN:
            depth += 1
        elif tok.token_type == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0 and tok.token_type == TokenType.FROM:
            seen_from = True
        elif depth == 0 and tok.token_type == TokenType.INTO:
            if not seen_from:
                raise at_token(tok, "INTO 'topic' goes at the end of the query, after FROM ...")
            _into_clause(tok, toks[i + 1 :], st)
            return toks[:i]
    return toks


def _take_stream_op(toks: list[Token], st: Statement) -> list[Token]:
    if len(toks) > 1 and toks[0].token_type == TokenType.SELECT and _upper(toks[1]) in STREAM_OPS:
        st.stream_op, st.op_token = _upper(toks[1]), toks[1]
        rest = toks[2:]
        if rest and rest[0].token_type == TokenType.L_PAREN:  # ISTREAM(a, b): CQL's own form
            depth = 0
            for j, tok in enumerate(rest):
                depth += (tok.token_type == TokenType.L_PAREN) - (
                    tok.token_type == TokenType.R_PAREN
                )
                if depth == 0:
                    rest = rest[1:j] + rest[j + 1 :]
                    break
        return [toks[0], *rest]
    return toks


def _prepare(toks: list[Token]) -> tuple[list[Token], Statement]:
    """One statement's tokens as sqlglot should see them, and what was taken out."""
    st = Statement("select", toks[0])
    if _upper(toks[0]) == "EXPLAIN":
        st.explain, toks = True, toks[1:]
        if not toks:
            raise at_token(st.start, "EXPLAIN of what? expected EXPLAIN SELECT ...")
    if toks[0].token_type == TokenType.CREATE and len(toks) > 1:
        what = _upper(toks[1])
        if what == "STREAM":
            st.kind = "stream"
            t = toks[1]
            return [
                toks[0],
                Token(TokenType.TABLE, "TABLE", t.line, t.col, t.start, t.end),
                *toks[2:],
            ], st
        if what == "QUERY":
            st.kind = "query"
            if len(toks) < 3 or toks[2].token_type not in (TokenType.VAR, TokenType.IDENTIFIER):
                raise at_token(toks[min(2, len(toks) - 1)], "expected CREATE QUERY name ...")
            st.name = toks[2].text
            as_at = next(
                (j for j in range(3, len(toks)) if toks[j].token_type == TokenType.ALIAS), None
            )
            if as_at is None:
                raise at_token(toks[-1], "expected CREATE QUERY name [INTO 'topic'] AS SELECT ...")
            head = toks[3:as_at]
            cut = next((j for j, t in enumerate(head) if t.token_type == TokenType.WITH), len(head))
            if cut:
                if head[0].token_type != TokenType.INTO:
                    raise at_token(head[0], "expected INTO 'topic', WITH (...) or AS")
                _into_clause(head[0], head[1:cut], st)
            if cut < len(head):
                st.settings = _settings(head[cut:])
            toks = toks[as_at + 1 :]
            if not toks or toks[0].token_type != TokenType.SELECT:
                raise at_token(toks[0] if toks else st.start, "expected AS SELECT ...")
    if toks[0].token_type != TokenType.SELECT:
        raise at_token(toks[0], "expected CREATE STREAM, CREATE QUERY, SELECT or EXPLAIN SELECT")
    toks = _take_stream_op(toks, st)
    toks = _take_windows(toks, st)
    if st.into is None:
        toks = _take_into(toks, st)
    return toks, st


class Streamon(Dialect):
    """sqlglot's default SQL plus the CQL parts above."""

    class Tokenizer(tokens.Tokenizer):
        KEYWORDS = {k: v for k, v in tokens.Tokenizer.KEYWORDS.items() if k != "EXPLAIN"}

    class Parser(parser.Parser):
        def parse(self, raw_tokens: list[Token], sql: str) -> list[exp.Expr | None]:
            out: list[exp.Expr | None] = []
            for chunk in _statements(raw_tokens):
                toks, st = _prepare(chunk)
                try:
                    parsed = super().parse(toks, sql)
                except ParseError as exc:
                    raise CqlError.from_parse_error(exc) from None
                for expression in parsed:
                    if expression is not None:
                        expression.meta["cql"] = st
                        out.append(expression)
            return out


def _statements(toks: list[Token]) -> list[list[Token]]:
    chunks: list[list[Token]] = [[]]
    for tok in toks:
        if tok.token_type == TokenType.SEMICOLON:
            chunks.append([])
        else:
            chunks[-1].append(tok)
    return [c for c in chunks if c]


def parse_statements(text: str) -> list[Any]:
    """Every statement of ``text``, each with its :class:`Statement` in ``meta["cql"]``."""
    dialect = Streamon()
    try:
        toks = dialect.tokenize(text)
    except Exception as exc:  # sqlglot's TokenError names no position: find it
        raise CqlError.from_token_error(exc, text) from None
    return dialect.parser().parse(toks, text)
