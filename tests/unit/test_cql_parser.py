"""CQL text (processors/cql), in process.

- Every example of docs/cql.md builds the same LogicalPlan as its Python twin there (the
  catalog block, then pairs of sql and python blocks), and Example 1's file gives the paper's
  query.
- Malformed queries, each refused with the line, the column and the text at fault.
- A property: cutting tokens out of valid queries gives a query or a positioned CqlError, never
  another exception.
- What the pre-pass relies on in sqlglot: ``EXPLAIN`` would otherwise swallow the statement, a
  window's tokens, identifiers' positions.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.commands.queries import BUILTIN, load_plan
from processors.core.columns import col
from processors.core.plan import QueryError
from processors.core.query import Query
from processors.cql import CqlError, parse_cql
from processors.cql.dialect import Streamon
from topics.avro import load_schema

ROOT = Path(__file__).parents[2]
DOC = ROOT / "docs" / "cql.md"
BLOCKS = re.findall(r"```(sql|python)\n(.*?)```", DOC.read_text(), re.S)
CATALOG = BLOCKS[0][1]
PY_CATALOG = BLOCKS[1][1]
PAIRS = [(BLOCKS[i][1], BLOCKS[i + 1][1]) for i in range(2, len(BLOCKS) - 1, 2)]


def python_plan(code: str):
    scope = {"Query": Query, "col": col, "load_schema": load_schema}
    exec(PY_CATALOG + code, scope)  # noqa: S102 (the documentation's own examples)
    return scope["query"].build()


def test_the_documentation_has_its_examples_in_pairs() -> None:
    assert [kind for kind, _ in BLOCKS[:2]] == ["sql", "python"]
    assert all(
        BLOCKS[i][0] == "sql" and BLOCKS[i + 1][0] == "python" for i in range(2, len(BLOCKS) - 1, 2)
    )
    assert len(PAIRS) >= 4


@pytest.mark.parametrize("index", range(len(PAIRS)))
def test_each_documented_example_builds_its_python_twins_plan(index: int) -> None:
    sql, code = PAIRS[index]
    got = parse_cql(sql, CATALOG).query().build()
    want = python_plan(code)
    assert got.to_json() == want.to_json()
    assert got == want


def test_query_from_cql_is_the_same_entry() -> None:
    sql, code = PAIRS[0]
    assert Query.from_cql(sql, CATALOG).build() == python_plan(code)


def test_example_one_as_printed() -> None:
    plan = load_plan(str(ROOT / "processors/workloads/cql/an_example1.cql"), require_into=False)
    assert [str(w) for w in plan.windows.values()] == ["A [ROWS 10]", "B [ROWS 10]", "C [ROWS 10]"]
    assert [str(j) for j in plan.joins] == ["A.a = B.a", "B.b = C.b"]
    assert [c.name for c in plan.output] == ["a", "b", "c"] and plan.filters == ()
    assert plan.name == "an_example1" and plan.result_topic == "an_example1-results"


def test_create_stream_columns_become_an_avro_record() -> None:
    script = parse_cql(
        "CREATE STREAM s (a BIGINT NOT NULL, b DOUBLE, c STRING, d BOOLEAN NOT NULL,"
        " ts BIGINT NOT NULL) WITH (topic = 's', timestamp = 'ts', partitions = 2);"
    )
    decl = script.streams["s"]
    assert decl.schema == {"type": "record", "name": "s", "fields": [
        {"name": "a", "type": "long"},
        {"name": "b", "type": ["null", "double"], "default": None},
        {"name": "c", "type": ["null", "string"], "default": None},
        {"name": "d", "type": "boolean"},
        {"name": "ts", "type": "long"}]}  # fmt: skip
    assert (decl.topic, decl.timestamp, decl.partitions, decl.key) == ("s", "ts", 2, None)


def test_a_worker_needs_into(tmp_path: Path) -> None:
    q = tmp_path / "q.cql"
    q.write_text(CATALOG + "\nSELECT r.ts FROM readings AS r;")
    with pytest.raises(QueryError, match=r"q\.cql: line 6, column 1 at 'SELECT': .*INTO 'topic'"):
        load_plan(str(q))
    assert load_plan(str(q), require_into=False).result_topic == "q-results"


#: (query, line, column, token, words of the message)
MALFORMED = [
    ("SELECT r.ts FROM readings [ROWS] AS r", 1, 28, "ROWS", "expected ROWS n"),
    ("SELECT r.ts FROM readings [ROWS 5 AS r", 1, 27, "[", "not closed"),
    ("SELECT r.ts FROM readings [] AS r", 1, 27, "[", "empty window"),
    ("SELECT r.ts FROM readings [RANGE 5] AS r", 1, 34, "5", "RANGE n <unit>"),
    ("SELECT r.ts FROM readings [RANGE x MINUTES] AS r", 1, 34, "x", "positive whole number"),
    ("SELECT r.ts FROM readings [RANGE 5 PARSECS] AS r", 1, 36, "PARSECS", "unknown time unit"),
    ("SELECT r.ts FROM readings [SLIDE 5] AS r", 1, 28, "SLIDE", "expected ROWS n, RANGE"),
    ("SELECT r.ts FROM readings [PARTITION BY ROWS 5] AS r", 1, 41, "ROWS", "PARTITION BY columns"),
    ("SELECT r.ts FROM readings [PARTITION BY sensor_id] AS r", 1, 41, "sensor_id", "ROWS n"),
    ("SELECT r.ts FROM readings [ROWS 1.5] AS r", 1, 33, "1.5", "positive whole number"),
    ("SELECT r.ts FROM readings [ROWS 0] AS r", 1, 33, "0", "positive whole number"),
    ("SELECT r.ts FROM readings AS r INTO hot", 1, 37, "hot", "quoted name"),
    ("SELECT r.ts INTO 'x' FROM readings AS r", 1, 13, "INTO", "at the end"),
    ("SELECT r.ts FROM readings AS r INTO 'x' PARTITIONS", 1, 41, "PARTITIONS", "PARTITIONS n"),
    ("SELECT r.ts FROM readings AS r INTO 'x' PARTITIONS 0", 1, 52, "0", "positive"),
    ("SELECT r.ts FROM readings AS r INTO 'x' EXTRA", 1, 41, "EXTRA", "PARTITIONS n"),
    ("CREATE QUERY AS SELECT r.ts FROM readings AS r", 1, 14, "AS", "CREATE QUERY name"),
    ("CREATE QUERY q SELECT r.ts FROM readings AS r", 1, 16, "SELECT", "WITH (...) or AS"),
    ("CREATE QUERY q AS r.ts FROM readings AS r", 1, 19, "r", "AS SELECT"),
    ("EXPLAIN", 1, 1, "EXPLAIN", "EXPLAIN SELECT"),
    ("UPDATE readings SET x = 1", 1, 1, "UPDATE", "expected CREATE STREAM"),
    ("SELECT RSTREAM r.ts FROM readings AS r", 1, 8, "RSTREAM", "not supported"),
    ("SELECT r.ts FROM readings AS r WHERE r.ts > 1 OR r.ok = TRUE", 1, 38, "OR", "OR is not"),
    ("SELECT r.ts FROM readings AS r WHERE r.ts + 1 > 2", 1, 38, "r.ts + 1 > 2", "arithmetic"),
    ("SELECT r.ts FROM readings AS r WHERE NOT r.ok = TRUE", 1, 42, "NOT", "not supported"),
    ("SELECT r.ts FROM readings AS r WHERE r.ts > r.humidity", 1, 38, ">", "two different"),
    ("SELECT r.nope FROM readings AS r", 1, 8, "r.nope", "has no column 'nope'"),
    ("SELECT x.ts FROM readings AS r", 1, 8, "x.ts", "no stream 'x'"),
    ("SELECT ts FROM nowhere", 1, 16, "nowhere", "unknown stream"),
    ("SELECT r.ts FROM readings AS r, readings AS r", 1, 33, "readings AS r", "twice"),
    ("SELECT r.ts FROM readings AS r LEFT JOIN sites AS s ON r.site = s.name", 1, 42, "LEFT",
     "LEFT JOIN"),
    ("SELECT r.ts FROM readings AS r ORDER BY r.ts", 1, 41, "ORDER BY", "ORDER BY"),
    ("SELECT r.ts FROM readings AS r LIMIT 5", 1, 38, "LIMIT 5", "LIMIT"),
    ("SELECT DISTINCT r.ts FROM readings AS r", 1, 1, "DISTINCT", "DISTINCT"),
    ("SELECT r.ts + 1 FROM readings AS r", 1, 8, "r.ts + 1", "name a computed column with AS"),
    ("SELECT r.ts, r.site + 1 AS x FROM readings AS r", 1, 14, "r.site + 1", "r.site is string"),
    ("SELECT sum(*) FROM readings AS r", 1, 8, "SUM(*)", "give a column"),
    ("SELECT r.site, count(*) FROM readings AS r", 1, 8, "r.site", "GROUP BY"),
    ("SELECT r.ts FROM readings AS r WHERE r.site IN (SELECT name FROM sites)", 1, 38, "IN",
     "values"),
    ("SELECT r.ts FROM readings AS r WHERE r.ts > 1 AND", 1, 47, "AND", "missing"),
    ("SELECT r.ts AS a, r.site FROM readings AS r", 1, 8, "r.ts", "go after the others"),
    ("SELECT r.ts FROM readings AS r WHERE r.site = 'a", 1, 47, "'", "unterminated"),
    ("SELECT r.ts FROM (SELECT * FROM readings) AS r", 1, 26, "SELECT", "no subqueries"),
    ("SELECT FROM readings AS r", 1, 1, "SELECT", "select list is empty"),
    ("SELECT r.ts FROM readings AS r GROUP BY r.site HAVING count(*) > 1", 1, 55, "HAVING",
     "HAVING"),
    ("CREATE STREAM t (a BIGINT, ts BIGINT) WITH (topic = 't', timestamp = 'ts')", 1, 70,
     "timestamp", "NOT NULL"),
    ("CREATE STREAM t (a GEOMETRY NOT NULL) WITH (topic = 't')", 1, 18, "a", "not supported"),
    ("CREATE STREAM t (a BIGINT) WITH (topic = 't', colour = 'red')", 1, 56, "colour",
     "unknown option"),
    ("CREATE STREAM t (a BIGINT) WITH (key = 'a')", 1, 15, "t", "topic"),
    ("CREATE STREAM t WITH (topic = 't')", 1, 15, "t", "columns"),
    ("CREATE STREAM readings (a BIGINT) WITH (topic = 't')", 1, 15, "readings", "catalog"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "line", "column", "token", "words"), MALFORMED)
def test_a_malformed_query_names_line_column_and_token(
    text: str, line: int, column: int, token: str, words: str
) -> None:
    with pytest.raises(CqlError) as err:
        parse_cql(text, CATALOG).query()
    e = err.value
    assert (e.line, e.col) == (line, column), str(e)
    assert token in e.token and words in e.reason, str(e)


def test_positions_count_lines() -> None:
    with pytest.raises(CqlError) as err:
        parse_cql(
            "SELECT r.ts\nFROM readings [ROWS 3] AS r\nWHERE r.ts > 1 OR r.ts < 0", CATALOG
        ).query()
    assert (err.value.line, err.value.col) == (3, 7), str(err.value)


VALID = [sql for sql, _ in PAIRS]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(VALID), st.data())
def test_cutting_tokens_gives_a_query_or_a_positioned_error(sql: str, data: st.DataObject) -> None:
    tokens = Streamon().tokenize(sql)
    cut = sorted(data.draw(st.sets(st.integers(0, len(tokens) - 1), min_size=1, max_size=3)))
    pieces, last = [], 0
    for i in cut:
        pieces.append(sql[last : tokens[i].start])
        last = tokens[i].end + 1
    text = "".join(pieces) + sql[last:]
    try:
        parse_cql(text, CATALOG).query().build()
    except CqlError as e:
        assert 1 <= e.line <= text.count("\n") + 1 and e.col >= 1, (text, str(e))
    except QueryError:
        pass  # a plan the builder refuses (it names the stream, field or topic)


def test_sqlglot_still_tokenizes_as_the_pre_pass_expects() -> None:
    toks = Streamon().tokenize("EXPLAIN SELECT a FROM s [PARTITION BY k ROWS 5] INTO 'x'")
    kinds = [t.token_type.name for t in toks]
    assert kinds[:2] == ["VAR", "SELECT"], "EXPLAIN must stay a word, not swallow the statement"
    assert kinds[5:8] == ["L_BRACKET", "PARTITION_BY", "VAR"]
    assert kinds[-2:] == ["INTO", "STRING"]


def test_a_worker_does_not_run_an_explain(tmp_path: Path) -> None:
    q = tmp_path / "q.cql"
    q.write_text(CATALOG + "\nEXPLAIN SELECT r.ts FROM readings AS r INTO 'out';")
    with pytest.raises(QueryError, match="EXPLAINs its query"):
        load_plan(str(q))
    assert load_plan(str(q), require_into=False).result_topic == "out"


def test_the_builtin_queries_ship_as_cql() -> None:
    for name in BUILTIN:
        shipped = ROOT / "processors" / "workloads" / "cql" / f"{name}.cql"
        assert load_plan(str(shipped)) == load_plan(name), name


SETTINGS_ERRORS = [
    ("CREATE QUERY q WITH (idle_timeout_ms = 0) AS SELECT r.ts FROM readings AS r", 1, 22,
     "positive int"),
    ("CREATE QUERY q WITH (colour = 1) AS SELECT r.ts FROM readings AS r", 1, 22,
     "unknown setting"),
    ("CREATE QUERY q WITH (adapt_alpha = 0.5) AS SELECT r.ts FROM readings AS r", 1, 22,
     "needs adapt"),
    ("CREATE QUERY q WITH (adapt = 'agreedy', adapt_bogus = 1) AS SELECT r.ts FROM readings AS r",
     1, 22, "bogus"),
    ("CREATE QUERY q WITH (processing_guarantee = 'maybe') AS SELECT r.ts FROM readings AS r", 1,
     22, "not one of"),
    ("CREATE QUERY q WITH idle_timeout_ms = 1 AS SELECT r.ts FROM readings AS r", 1, 21,
     "WITH (setting"),
    ("CREATE QUERY q WITH (idle_timeout_ms 1) AS SELECT r.ts FROM readings AS r", 1, 38,
     "= value"),
    ("CREATE QUERY q WITH (idle_timeout_ms = -1) AS SELECT r.ts FROM readings AS r", 1, 40,
     "a number"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "line", "column", "words"), SETTINGS_ERRORS)
def test_a_bad_setting_is_named_where_it_is(text: str, line: int, column: int, words: str) -> None:
    with pytest.raises(CqlError) as err:
        parse_cql(text, CATALOG).query().build()
    assert (err.value.line, err.value.col) == (line, column) and words in err.value.reason, str(
        err.value
    )


def test_a_column_list_can_name_its_avro_record_and_a_query_can_be_quoted() -> None:
    script = parse_cql(
        "CREATE STREAM s (a BIGINT NOT NULL, ts BIGINT NOT NULL) WITH (topic = 's', "
        "timestamp = 'ts', record = 'streamon.workloads.RouterPacket');"
        "CREATE QUERY \"demo-1\" INTO 'out' AS SELECT s.a FROM s;"
    )
    schema = script.streams["s"].schema
    assert (schema["name"], schema["namespace"]) == ("RouterPacket", "streamon.workloads")
    assert script.query().build().name == "demo-1"
    with pytest.raises(CqlError, match="not an Avro name"):
        parse_cql("CREATE STREAM s (a BIGINT) WITH (topic = 's', record = 'x..y');")
