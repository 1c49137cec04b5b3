"""The plan page's serving (processors/runtime/web_pages.py): the page is one self-contained
response whose policy allows exactly its inline script and style, and the graph it draws
follows the compiled steps."""

from __future__ import annotations

import base64
import hashlib
import re

from processors.core.query import Query, col
from processors.physical.compiler import compile_plan
from processors.runtime.web_pages import page_html, pipeline_graph
from topics.avro import load_schema


def test_the_page_is_one_response_that_loads_nothing_from_elsewhere() -> None:
    html, policy = page_html()
    assert "src=" not in html.replace('src="data:', "") and 'href="plan.css"' not in html
    assert html.count("<script>") == 2 and "<style>" in html
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # no CDN, no remote file
    for script in re.findall(r"<script>(.*?)</script>", html, re.S):
        digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in policy.split("script-src", 1)[1].split(";", 1)[0]
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy


def readings(name: str) -> Query:
    query = Query(name)
    query.stream("r", topic="in", schema=load_schema("reading"), key="sensor_id",
                 timestamp="ts", partitions=2)  # fmt: skip
    return query.into("out", partitions=2)


def test_a_filter_query_is_drawn_as_its_fused_ingest_agent() -> None:
    plan = readings("f").where(col("r.temperature") < 25.0).build()
    graph = pipeline_graph(plan, compile_plan(plan))
    nodes = {n["id"]: n for n in graph["nodes"]}
    assert set(nodes) == {"in", "ingest.r", "out"}
    assert nodes["ingest.r"]["stages"] == ["decode", "filter(r)"]
    assert nodes["in"]["external"] and nodes["out"]["external"]
    assert graph["edges"] == [["in", "ingest.r"], ["ingest.r", "out"]]


def test_a_join_query_is_drawn_through_its_envelope_topics() -> None:
    schema = load_schema("packet")
    query = Query("j")
    for s in ("a", "b"):
        query.stream(s, topic=f"t.{s}", schema=schema, key="pid", timestamp="ts", partitions=2)
        query.window(s, range_ms=1_000)
    plan = query.join("a.pid", "b.pid").select(pid="a.pid").into("out", partitions=2).build()
    pipeline = compile_plan(plan)
    graph = pipeline_graph(plan, pipeline)
    nodes = {n["id"]: n for n in graph["nodes"]}
    (join,) = [n for n in nodes.values() if n["kind"] == "agent" and "mjoin" in n["stages"]]
    assert {"window(a)", "window(b)"} <= set(join["stages"])
    for s in ("a", "b"):
        envelope = pipeline.ingest_topics[s]
        assert not nodes[envelope]["external"]
        assert [f"ingest.{s}", envelope] in graph["edges"]
        assert [envelope, join["id"]] in graph["edges"]
    assert [join["id"], "out"] in graph["edges"]
