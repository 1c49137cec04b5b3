"""CQL errors: each names the line, the column and the token at fault, and what was expected."""

from __future__ import annotations

import re
from typing import Any

from sqlglot import exp
from sqlglot.tokens import Token

from processors.core.plan import QueryError


class CqlError(QueryError):
    """A CQL text that cannot become a query: ``line``/``col`` (1-based) and the ``token``."""

    def __init__(self, message: str, line: int = 0, col: int = 0, token: str = "") -> None:
        self.line, self.col, self.token, self.reason = line, col, token, message
        where = f"line {line}, column {col}" if line else "CQL"
        near = f" at {token!r}" if token else ""
        super().__init__(f"{where}{near}: {message}")

    @classmethod
    def from_parse_error(cls, exc: Any) -> CqlError:
        """sqlglot's ParseError (its first error: description, line, col, highlight)."""
        errors = getattr(exc, "errors", None) or [{}]
        first = errors[0]
        message = _plain(str(first.get("description") or exc).strip())
        token = str(first.get("highlight") or "")
        col = int(first.get("col") or 0) - max(0, len(token) - 1)  # sqlglot: the token's end
        return cls(message, int(first.get("line") or 0), max(1, col), token)

    @classmethod
    def from_token_error(cls, exc: Exception, text: str) -> CqlError:
        """sqlglot's TokenError quotes the text it read up to the fault; locate it."""
        message = str(exc)
        quoted = message.partition("'")[2].rpartition("'")[0]
        end = text.find(quoted) + len(quoted) if quoted and quoted in text else len(text)
        line = text.count("\n", 0, end) + 1
        col = end - (text.rfind("\n", 0, end) + 1)
        token = text[max(0, end - 10) : end].split()[-1] if text[:end].split() else ""
        return cls("cannot read this: an unterminated string or quoted name?", line, col, token)


_MISSING = re.compile(r"Required keyword: '(\w+)' missing for <class '[\w.]*\.(\w+)'>")


def _plain(message: str) -> str:
    """sqlglot's messages, with its class names said in words."""
    found = _MISSING.search(message)
    if found:
        return f"incomplete {found.group(2).upper()}: its {found.group(1)} is missing after it"
    return message


def at_token(tok: Token, message: str) -> CqlError:
    """An error at ``tok`` (sqlglot tokens count columns from 1 at the token's last character)."""
    return CqlError(message, tok.line, max(1, tok.col - len(tok.text) + 1), tok.text)


def at_node(node: exp.Expr | None, message: str, fallback: Token | None = None) -> CqlError:
    """An error at ``node``: where its first part that knows its place was written (sqlglot
    keeps line, column and offsets on identifiers, literals, functions); else ``fallback``."""
    if node is not None:
        placed = [p.meta for p in node.walk() if "line" in p.meta and "start" in p.meta]
        if placed:
            first = min(placed, key=lambda m: int(m["start"]))
            width = int(first.get("end", first["start"])) - int(first["start"])
            col = max(1, int(first["col"]) - width)
            return CqlError(message, int(first["line"]), col, node.sql())
    if fallback is not None:
        return CqlError(message, fallback.line, max(1, fallback.col - len(fallback.text) + 1),
                        node.sql() if node is not None else fallback.text)  # fmt: skip
    return CqlError(message, token=node.sql() if node is not None else "")
