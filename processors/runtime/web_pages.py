"""A worker's web pages: the live plan page at ``/``, the status, plan and EXPLAIN as JSON,
and ``/metrics``.

Every page goes through one bearer-token guard (:mod:`processors.runtime.web_auth`). A browser
cannot send a header when it opens a page, so ``/`` alone also takes the token as
``?token=``. The page is one response: its style and script (package data in
``processors/web/``) are put inline when it is served, so no later request carries the token
in its address; the script sends it as the ``Authorization`` header of each poll of
``/streamon/status``. The page loads nothing from elsewhere (no CDN; it works offline), and
its Content-Security-Policy allows only its own inline script and style and requests to the
worker itself.
"""

from __future__ import annotations

import base64
import functools
import hashlib
from collections.abc import Callable
from importlib import resources
from typing import Any

from processors.core.plan import LogicalPlan
from processors.physical.steps import SINK_AGENT, PhysicalPlan, StageNode
from processors.runtime import metrics
from processors.runtime.web_auth import guarded

#: the package holding the page's files
STATIC_PACKAGE = "processors.web"
STYLE = "plan.css"
#: the page's scripts, in the order index.html loads them (charts.js: the drawing helpers)
SCRIPTS = ("charts.js", "plan.js")

Body = Callable[[], dict[str, Any]]


def _static(name: str) -> str:
    return resources.files(STATIC_PACKAGE).joinpath(name).read_text(encoding="utf-8")


@functools.cache
def page_html() -> tuple[str, str]:
    """The plan page with its style and scripts inline, and the Content-Security-Policy that
    allows exactly those (by hash) and requests to the page's own origin."""
    html = _static("index.html")
    style = _static(STYLE)
    html = _inline(html, f'<link rel="stylesheet" href="{STYLE}">', f"<style>{style}</style>")
    hashes = []
    for name in SCRIPTS:
        script = _static(name)
        html = _inline(html, f'<script src="{name}"></script>', f"<script>{script}</script>")
        hashes.append(f"'{_sha256(script)}'")
    policy = (
        "default-src 'none'; "
        f"script-src {' '.join(hashes)}; style-src '{_sha256(style)}'; "
        "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )
    return html, policy


def _inline(html: str, tag: str, inline: str) -> str:
    if tag not in html:
        raise RuntimeError(f"{STATIC_PACKAGE}/index.html lacks {tag}")
    return html.replace(tag, inline)


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


def pipeline_graph(plan: LogicalPlan, pipeline: PhysicalPlan) -> dict[str, Any]:
    """The query as the page draws it: topics and agents (nodes, each agent with the stages it
    runs) and what feeds what (edges), from the compiled steps the worker runs."""
    nodes: dict[str, dict[str, Any]] = {}
    edges: list[tuple[str, str]] = []

    def topic(name: str, external: bool = False) -> str:
        nodes.setdefault(name, {"id": name, "kind": "topic", "external": external})
        return name

    def agent(name: str, stages: list[str]) -> str:
        nodes[name] = {"id": name, "kind": "agent", "stages": stages}
        return name

    result = topic(plan.result_topic, external=True)
    for stream in plan.streams:
        ingest = agent(f"ingest.{stream.name}", ["decode"])
        edges.append((topic(stream.topic, external=True), ingest))
        if pipeline.fused:  # the one step runs inside the ingest agent
            nodes[ingest]["stages"] += [_label(n) for n in pipeline.steps[0].nodes]
            edges.append((ingest, result))
        else:
            edges.append((ingest, topic(pipeline.ingest_topics[stream.name])))
    if not pipeline.fused:
        for step in pipeline.steps:
            stages = [_label(n) for _, nodes_ in step.inputs for n in nodes_]
            name = agent(step.name, stages + [_label(n) for n in step.nodes])
            edges += [(topic(t), name) for t in step.in_topics]
            last = step is pipeline.steps[-1] and not pipeline.sink_agent
            edges.append((name, result if last else topic(step.out_topic)))
        if pipeline.sink_agent:
            sink = agent(SINK_AGENT, ["encode"])
            edges += [(topic(pipeline.sink_topic), sink), (sink, result)]
    return {"nodes": list(nodes.values()), "edges": [list(e) for e in edges]}


def _label(node: StageNode) -> str:
    """A stage as the page names it: its kind and the stream or operator it belongs to."""
    of = node.operator or node.stream
    return f"{node.kind}({of})" if of else node.kind


def add_pages(
    app: Any, token: str | None, status_body: Body, plan_json: dict[str, Any], explain: Body
) -> None:
    """Register the worker's pages on its Faust app, each behind the token guard."""
    guard = guarded(token)

    @app.page("/")
    @guarded(token, in_query=True)
    async def plan_view(web: Any, request: Any) -> Any:
        """The live plan page (processors/web/)."""
        html, policy = page_html()
        headers = {
            "Content-Security-Policy": policy,
            "Referrer-Policy": "no-referrer",
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",
        }
        return web.html(html, headers=headers)

    @app.page("/streamon/status")
    @guard
    async def status_page(web: Any, request: Any) -> Any:
        return web.json(status_body(), headers={"Cache-Control": "no-store"})

    @app.page("/metrics")  # the same figures for Prometheus (processors.runtime.metrics)
    @guard
    async def metrics_page(web: Any, request: Any) -> Any:
        body = metrics.render(status_body())  # aiohttp refuses a charset in content_type=
        return web.bytes(body, headers={"Content-Type": metrics.CONTENT_TYPE})

    @app.page("/streamon/explain")
    @guard
    async def explain_page(web: Any, request: Any) -> Any:
        return web.json(explain())

    @app.page("/streamon/plan")
    @guard
    async def plan_page(web: Any, request: Any) -> Any:
        return web.json(plan_json)
