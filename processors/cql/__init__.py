"""CQL text: stream declarations and continuous queries (issue 17; docs/cql.md).

    script = parse_cql(open("ex1.cql").read())
    query = script.query()          # the file's one query, as a Query (then .build())

A file holds any number of ``CREATE STREAM`` declarations and one query (``SELECT ...``,
``CREATE QUERY name ... AS SELECT ...`` or ``EXPLAIN SELECT ...``); declarations may also come
from a separate catalog file. Parsing: :mod:`.dialect` (a sqlglot dialect); declarations:
:mod:`.catalog`; the query's Query calls: :mod:`.translate`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp

from processors.core.query import Query
from processors.cql.catalog import StreamDecl, check_unique, stream_decl
from processors.cql.dialect import Statement, parse_statements
from processors.cql.errors import CqlError, at_node, at_token
from processors.cql.translate import to_query

__all__ = ["CqlError", "CqlScript", "StreamDecl", "parse_cql"]


@dataclass
class CqlScript:
    """The declarations and queries of one CQL text (plus its catalog's declarations)."""

    streams: dict[str, StreamDecl] = field(default_factory=dict)
    queries: list[exp.Expr] = field(default_factory=list)

    @property
    def explain(self) -> bool:
        """Whether the file's query is an ``EXPLAIN SELECT``."""
        return any(q.meta["cql"].explain for q in self.queries)

    def query(self, name: str = "query", *, require_into: bool = False) -> Query:
        """The file's one query (named ``name`` unless CREATE QUERY names it). Without INTO it
        gets the result topic ``<name>-results`` unless ``require_into`` (a worker needs to be
        told where results go)."""
        if len(self.queries) != 1:
            message = f"expected one query in the file, found {len(self.queries)}"
            if len(self.queries) > 1:
                raise at_token(self.queries[1].meta["cql"].start, message)
            raise CqlError(message)
        select = self.queries[0]
        q = to_query(select, self.streams, name)
        st: Statement = select.meta["cql"]
        if st.into is None:
            if require_into:
                raise at_token(
                    st.start,
                    "the query says nowhere where its results go: end it with INTO 'topic'",
                )
            q.into(f"{q.name}-results")
        return q


def parse_cql(text: str, catalog: str | CqlScript | None = None) -> CqlScript:
    """Parse ``text``; ``catalog`` (CQL text or a parsed script) declares more streams."""
    base = parse_cql(catalog) if isinstance(catalog, str) else catalog
    creates: list[exp.Create] = []
    queries: list[exp.Expr] = []
    for statement in parse_statements(text):
        if statement.meta["cql"].kind == "stream":
            creates.append(statement)
        else:
            queries.append(statement)
    own = check_unique([stream_decl(c) for c in creates], creates)
    streams = dict(base.streams) if base is not None else {}
    for name, decl in own.items():
        if name in streams:
            node = next(c for c in creates if stream_decl(c).name == name)
            raise at_node(node.this, f"stream {name} is declared both here and in the catalog")
        streams[name] = decl
    return CqlScript(streams, queries)
