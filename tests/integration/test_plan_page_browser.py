"""The worker's live plan page (``/``, processors/web/) in a real browser.

Headless Chromium from the system (Debian's ``chromium`` and ``chromium-driver``, which
``.ci/setup`` installs when it runs as root) driven by Selenium through the system's
chromedriver: no browser is downloaded. A real worker runs on the embedded broker.

- The filter query of test_filter_query: the page loads without a console error, draws the
  query's stages, and when the selectivities change under the running worker its filter
  reorders; the page shows the new order and version of a partition within a few seconds of
  the worker's status, and lists the change.
- The demo's query (``streamon demo``'s own query text and publisher, two of its phases): the
  page shows its inputs' windows, the four-way MJoin and the aggregate without a console error;
  when the routers' shared traffic shifts (phase 0, then phase 1) the worker's MJoin reorders
  and the page shows the new orders and version within a few seconds of the worker's status.
- A three-way join with ``STREAMON_WEB_TOKEN`` set: the page is refused without the token, and
  with it given once as ``?token=`` it polls the status with the token as a header and shows
  the MJoin's stages and each partition's join orders.

``STREAMON_PLAN_PAGE_SHOTS=DIR`` saves screenshots there (how docs/plan-page*.png were made);
nothing is written otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from integration.test_filter_query import (
    PARTITIONS,
    QUERY,
    A,
    B,
    phase_batch,
    scrape,
    wait_first,
)
from integration.test_join_query import publish_half, write_query

from processors.commands.demo import PARTITIONS as DEMO_PARTITIONS
from processors.commands.demo import PHASE_MS, demo_query, demo_workload
from processors.commands.launcher import WorkerProcess, wait_for_count
from processors.commands.network_query import publish
from processors.commands.publish import publish_batch
from processors.runtime.web_auth import ENV_WEB_TOKEN
from topics.admin import ensure_topics
from topics.avro import load_schema
from topics.specs import TopicSpec

CHROMIUM = os.environ.get("STREAMON_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("STREAMON_CHROMEDRIVER", "/usr/bin/chromedriver")
SHOTS = os.environ.get("STREAMON_PLAN_PAGE_SHOTS")
#: longest the page may take to show what the worker's status shows (it polls every second)
PAGE_DELAY_S = 5.0
START = 1_700_000_000_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium under chromedriver, its console kept (``goog:loggingPrefs``)."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    if missing:
        pytest.skip(f"no browser here: {missing} missing (apt-get install chromium "
                    "chromium-driver, as .ci/setup does when root)")  # fmt: skip
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium (the dev extra)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1700", "--no-first-run"):  # fmt: skip
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def page_url(worker: WorkerProcess) -> str:
    info = json.loads((worker.state_dir / "workers" / f"{worker.worker_id}.json").read_text())
    return str(info["page_url"])


def console_errors(driver: Any) -> list[dict]:
    """The browser console's errors since the last call (reading the log empties it)."""
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def open_page(driver: Any, url: str) -> None:
    """Open ``url`` with a console holding nothing from before: the browser is shared by the
    module's tests, and an earlier test's page, polling its stopped worker, logs refusals."""
    driver.get("about:blank")  # that page stops polling
    console_errors(driver)  # reading the log empties it
    driver.get(url)


def wait_until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.2)


def polls(driver: Any) -> int:
    return int(driver.execute_script("return document.body.dataset.polls || '0'"))


def page_orders(driver: Any) -> dict[tuple[str, str, str], tuple[list[str], int]]:
    """(partition, stage, pipeline) -> (order, version) as the page's order table shows them."""
    rows = driver.execute_script(
        "return [...document.querySelectorAll('tr.order-row')].map(r => [r.dataset.partition,"
        " r.dataset.stage, r.dataset.pipeline, r.dataset.order, r.dataset.version])"
    )
    return {(p, s, pl): (json.loads(o), int(v)) for p, s, pl, o, v in rows}


def graph_nodes(driver: Any) -> dict[str, str]:
    """Node id -> its text (name, stages) in the page's plan graph."""
    found = driver.execute_script(
        "return [...document.querySelectorAll('#graph g.node')].map(g => [g.dataset.id,"
        " [...g.querySelectorAll('text')].map(t => t.textContent).join(' ')])"
    )
    return dict(found)


def filter_status(worker: WorkerProcess) -> dict[str, dict]:
    agents = {a["agent"]: a for a in worker.status()["stats"]["agents"]}
    return agents["filter"]["plan"]


def mjoin_status(worker: WorkerProcess) -> dict[str, dict]:
    """Partition -> its MJoin's stats (orders by pipeline, changes_total) in the worker's status."""
    agents = {a["agent"]: a for a in worker.status()["stats"]["agents"]}
    return {p: unit[f"mjoin[{p}]"] for p, unit in agents["mjoin"]["plan"].items()}


def shows_worker_orders(driver: Any, worker: WorkerProcess) -> bool:
    """Whether the page's order table holds every MJoin order and version the worker reports."""
    shown = page_orders(driver)
    return all(
        shown.get((p, "mjoin", pipeline)) == (order, s["changes_total"])
        for p, s in mjoin_status(worker).items()
        for pipeline, order in s["orders"].items()
    )


def settled(worker: WorkerProcess, quiet_s: float = 2.0, timeout: float = 60.0) -> dict[str, int]:
    """The MJoin versions per partition once every partition has changed its orders at least
    once and none changed for ``quiet_s`` (the worker has adapted to what it was given)."""
    deadline = time.monotonic() + timeout
    last: dict[str, int] = {}
    since = time.monotonic()
    while time.monotonic() < deadline:
        now = {p: s["changes_total"] for p, s in mjoin_status(worker).items()}
        if now != last:
            last, since = now, time.monotonic()
        elif (
            len(now) == DEMO_PARTITIONS
            and all(now.values())
            and time.monotonic() - since >= quiet_s
        ):
            return now
        time.sleep(0.25)
    raise AssertionError(f"the MJoin orders did not settle in {timeout} s: {last}")


def screenshot(driver: Any, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(SHOTS) / name))


def test_the_plan_page_shows_the_stages_and_a_filter_reorder_live(
    browser: Any, bootstrap: str, tmp_path: Path, topic_name: str
) -> None:
    name, topic, result = topic_name, f"{topic_name}.in", f"{topic_name}.out"
    ensure_topics(bootstrap, [TopicSpec(topic, PARTITIONS)])
    query_file = tmp_path / "query.py"
    query_file.write_text(QUERY.format(topic=topic, result=result, name=name, p=PARTITIONS))
    worker = WorkerProcess(
        query_file, bootstrap=bootstrap, state_dir=tmp_path / "state", worker_id="w1"
    )
    try:
        worker.wait_holding([topic], PARTITIONS)
        open_page(browser, page_url(worker))
        wait_until(lambda: polls(browser) >= 2, 10, "the page polls the status")
        nodes = graph_nodes(browser)
        assert {topic, result, "ingest.r"} <= set(nodes), nodes
        assert "filter(r)" in nodes["ingest.r"], nodes  # the fused filter runs in ingest

        schema = load_schema("reading")
        first, second = phase_batch(1, START), phase_batch(2, START + 10 * 30_000)
        publish_batch(bootstrap, topic, first, schema)
        wait_for_count(bootstrap, result, 1, 60.0, [worker])
        assert all(p["order"][0] == A for p in wait_first(worker, A, 60.0).values())
        before = {p: s["changes_total"] for p, s in filter_status(worker).items()}
        shown = wait_until(
            lambda: (o := page_orders(browser)) and all(
                o.get((p, "filter", ""), ([], -1)) == (s["order"], s["changes_total"])
                for p, s in filter_status(worker).items()
            ) and o,
            PAGE_DELAY_S + 5, "the page shows phase 1's orders",
        )  # fmt: skip
        assert len(shown) == PARTITIONS

        publish_batch(bootstrap, topic, second, schema)

        def moved() -> tuple[str, dict] | None:  # a partition whose worker reordered
            for p, s in filter_status(worker).items():
                if s["changes_total"] > before[p]:
                    return p, s
            return None

        partition, stats = wait_until(moved, 60, "the worker reorders its filters")
        seen_at = time.monotonic()
        wait_until(
            lambda: (
                page_orders(browser).get((partition, "filter", ""), ([], -1))[1]
                >= stats["changes_total"]
            ),
            PAGE_DELAY_S,
            f"the page shows partition {partition}'s new version",
        )
        delay = time.monotonic() - seen_at
        assert delay <= PAGE_DELAY_S

        after = wait_first(worker, B, 60.0)
        assert all(s["order"][0] == B for s in after.values()), after
        wait_until(
            lambda: all(
                page_orders(browser).get((p, "filter", ""), ([], -1))[0][:1] == [B] for p in after
            ),
            PAGE_DELAY_S,
            "the page shows B first on every partition",
        )
        listed = browser.execute_script(
            "return [...document.querySelectorAll('#changes li.change')].map(li =>"
            " JSON.parse(li.dataset.to)[0])"
        )
        assert B in listed and A in listed, listed  # phase 1's change and phase 2's
        marks = browser.execute_script("return document.querySelectorAll('#timeline .mark').length")
        assert marks >= 2 * PARTITIONS  # two changes at least per partition on the timeline
        time.sleep(3)  # a few polls with the live charts drawn
        screenshot(browser, "plan-page.png")
        assert console_errors(browser) == []
    finally:
        worker.stop()


def test_the_plan_page_needs_the_token_and_works_with_it(
    browser: Any, bootstrap: str, tmp_path: Path, topic_name: str, monkeypatch: Any
) -> None:
    token = "page-test-token"
    monkeypatch.setenv(ENV_WEB_TOKEN, token)  # the worker's, and the launcher's status reads
    prefix, result, _, query_file = write_query(bootstrap, tmp_path, topic_name)
    worker = WorkerProcess(
        query_file, bootstrap=bootstrap, state_dir=tmp_path / "state", worker_id="w1"
    )
    try:
        worker.wait_holding([f"{prefix}.a", f"{prefix}.b", f"{prefix}.c"], 2)
        url = page_url(worker)
        browser.get(url)
        assert "missing or wrong bearer token" in browser.page_source
        browser.get(url + "?token=wrong")
        assert "missing or wrong bearer token" in browser.page_source
        console_errors(browser)  # the two refusals are console errors: forget them

        browser.get(f"{url}?token={token}")
        wait_until(lambda: polls(browser) >= 2, 10, "the page polls the status with the token")
        nodes = graph_nodes(browser)
        assert "mjoin" in nodes, nodes
        assert all(f"window({s})" in nodes["mjoin"] for s in "abc"), nodes
        assert "mjoin" in nodes["mjoin"].split(" ", 1)[1]  # the join stage among its stages

        publish_half(bootstrap, prefix, 0)
        wait_for_count(bootstrap, result, 1, 90.0, [worker])
        orders = wait_until(
            lambda: {k: v for k, v in page_orders(browser).items() if k[1] == "mjoin"}
            if len({k[0] for k in page_orders(browser) if k[1] == "mjoin"}) == 2 else None,
            PAGE_DELAY_S + 10, "the page shows both partitions' join orders",
        )  # fmt: skip
        pipelines = {k[2] for k in orders}
        assert pipelines == {"a", "b", "c"}, orders
        for (_, _, pipeline), (order, _) in orders.items():
            assert sorted(order) == sorted({"a", "b", "c"} - {pipeline}), orders
        time.sleep(3)
        screenshot(browser, "plan-page-join.png")
        assert console_errors(browser) == []
    finally:
        worker.stop()


def check_metrics_grew(first: dict[str, Any], then: dict[str, Any], versions: dict) -> None:
    """Issue 20's scrape on the demo worker: the families and their types, counters that grew
    with phase 1's sightings, and the join orders as info gauges at the versions in force."""
    kinds = {"streamon_agent_tuples_in": "counter", "streamon_agent_busy_seconds": "counter",
             "streamon_agent_output_latency_seconds": "histogram",
             "streamon_plan_order_info": "gauge", "streamon_plan_order_changes": "counter",
             "streamon_consumer_commit_lag_messages": "gauge"}  # fmt: skip
    for name, kind in kinds.items():
        assert name in then and then[name].type == kind, (name, then.get(name))

    def total(families: dict[str, Any], name: str) -> float:
        return sum(s.value for s in families[name].samples if s.name.endswith("_total"))

    for name in ("streamon_agent_tuples_in", "streamon_agent_busy_seconds"):
        assert total(then, name) > total(first, name) > 0, name
    orders = then["streamon_plan_order_info"].samples
    joins = [s for s in orders if s.labels["pipeline"]]  # a join pipeline's order
    shown = {s.labels["partition"]: int(s.labels["version"]) for s in joins}
    assert shown == versions, (shown, versions, {s.labels["operator"] for s in orders})


def test_the_plan_page_shows_the_demo_query_and_a_join_reorder_live(
    browser: Any, bootstrap: str, tmp_path: Path, topic_name: str
) -> None:
    """Issue 20's acceptance on ``streamon demo``'s own query and data (two of its four
    phases, its usual number of sightings per phase)."""
    prefix, result = topic_name, f"{topic_name}.totals"
    workload = demo_workload(records=20_000, phases=2)
    routers = workload.stream_names
    ensure_topics(bootstrap, [TopicSpec(f"{prefix}.{r}", DEMO_PARTITIONS) for r in routers])
    query_file = tmp_path / "demo.cql"
    query_file.write_text(demo_query(topic_name, prefix, result))
    worker = WorkerProcess(
        query_file, bootstrap=bootstrap, state_dir=tmp_path / "state", worker_id="w1"
    )
    # the demo's publisher, a phase at a time: phase 1 is sent once the worker adapted to 0
    phases = publish(bootstrap, prefix, workload, span_ms=PHASE_MS)
    with closing(phases):
        try:
            worker.wait_holding([f"{prefix}.{r}" for r in routers], DEMO_PARTITIONS)
            open_page(browser, page_url(worker))
            wait_until(lambda: polls(browser) >= 2, 10, "the page polls the status")
            assert browser.find_element("id", "query").text == topic_name
            nodes = graph_nodes(browser)
            for r in routers:  # each router's topic decoded, then its window before the MJoin
                assert {f"{prefix}.{r}", f"ingest.{r}"} <= set(nodes), nodes
                assert f"window({r})" in nodes["mjoin"], nodes
            assert "mjoin" in nodes["mjoin"].split(" ", 1)[1], nodes  # the join among its stages
            assert "aggregate" in nodes["aggregate"].split(" ", 1)[1], nodes
            assert result in nodes, nodes

            next(phases)  # phase 0: the worker leaves its initial orders for phase 0's
            wait_for_count(bootstrap, result, 1, 60.0, [worker])
            before = settled(worker)
            scraped = scrape(worker)
            wait_until(lambda: shows_worker_orders(browser, worker), PAGE_DELAY_S,
                       "the page shows phase 0's orders")  # fmt: skip
            shown = {k for k in page_orders(browser) if k[1] == "mjoin"}
            assert shown == {(str(p), "mjoin", r) for p in range(DEMO_PARTITIONS) for r in routers}

            next(phases)  # phase 1: the routers that shared little now share much

            def moved() -> tuple[str, dict] | None:  # a partition whose MJoin reordered
                for p, s in mjoin_status(worker).items():
                    if s["changes_total"] > before[p]:
                        return p, s
                return None

            partition, stats = wait_until(moved, 60, "the worker reorders its MJoin")
            seen_at = time.monotonic()

            def new_version_shown() -> bool:  # that version (its orders) or a later one
                shown = page_orders(browser)
                rows = [shown.get((partition, "mjoin", r), ([], -1)) for r in routers]
                if any(version < stats["changes_total"] for _, version in rows):
                    return False
                return any(v > stats["changes_total"] for _, v in rows) or all(
                    order == stats["orders"][r] for r, (order, _) in zip(routers, rows, strict=True)
                )

            wait_until(new_version_shown, PAGE_DELAY_S,
                       f"the page shows partition {partition}'s new join orders")  # fmt: skip
            delay = time.monotonic() - seen_at
            assert delay <= PAGE_DELAY_S

            for _ in phases:  # the last sightings of phase 1's packets
                pass
            after = settled(worker)
            assert all(after[p] > before[p] for p in before), (before, after)
            check_metrics_grew(scraped, scrape(worker), after)
            wait_until(lambda: shows_worker_orders(browser, worker), PAGE_DELAY_S,
                       "the page shows phase 1's orders and versions")  # fmt: skip
            listed = browser.execute_script(
                "return [...document.querySelectorAll('#changes li.change')].map(li =>"
                " [li.dataset.partition, li.dataset.stage, li.dataset.pipeline,"
                " JSON.parse(li.dataset.to)])"
            )
            for p, s in mjoin_status(worker).items():  # each partition's latest change listed
                last = s["recent_changes"][-1]
                assert [p, "mjoin", last["pipeline"], last["to"]] in listed, (p, last, listed)
            print(f"demo query: partition {partition}'s join reorder on the page {delay:.2f} s "
                  f"after the worker's status; versions {before} -> {after}")  # fmt: skip
            time.sleep(2)  # a few polls with the live charts drawn
            screenshot(browser, "plan-page-demo.png")
            assert console_errors(browser) == []
        finally:
            worker.stop()
