"""Who may read a worker's endpoints (processors/runtime/web_auth.py): loopback by default,
a bearer token when one is set, the CLI's --web-host."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from processors.cli import build_parser
from processors.runtime.web_auth import check_exposure, guarded, is_loopback


class FakeWeb:
    def json(self, value: Any, status: int = 200) -> tuple[int, Any]:
        return status, value


class FakeRequest:
    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = headers


async def page(web: FakeWeb, request: FakeRequest) -> tuple[int, Any]:
    return web.json({"ok": True})


def call(handler: Any, headers: dict[str, str]) -> tuple[int, Any]:
    return asyncio.run(handler(FakeWeb(), FakeRequest(headers)))


def test_loopback_addresses() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")
    assert not is_loopback("worker")  # a name may resolve anywhere


def test_a_token_is_required_once_set() -> None:
    open_page = guarded(None)(page)
    assert open_page is page and call(open_page, {}) == (200, {"ok": True})
    closed = guarded("s3cret")(page)
    assert call(closed, {})[0] == 401
    assert call(closed, {"Authorization": "Bearer wrong"})[0] == 401
    assert call(closed, {"Authorization": "s3cret"})[0] == 401  # the scheme is part of it
    assert call(closed, {"Authorization": "Bearer s3cret"}) == (200, {"ok": True})


def test_leaving_loopback_without_a_token_is_said(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="processors.runtime.web_auth"):
        check_exposure("127.0.0.1", None)
        check_exposure("0.0.0.0", "t")
        assert not caplog.records
        check_exposure("0.0.0.0", None)
    assert "without a token" in caplog.text and "STREAMON_WEB_TOKEN" in caplog.text


def test_the_worker_listens_on_loopback_unless_told() -> None:
    parser = build_parser()
    assert parser.parse_args(["worker", "q.py"]).web_host == "127.0.0.1"
    assert parser.parse_args(["worker", "q.py", "--web-host", "0.0.0.0"]).web_host == "0.0.0.0"


class QueryRequest(FakeRequest):
    def __init__(self, headers: dict[str, str], query: dict[str, str]) -> None:
        super().__init__(headers)
        self.query = query


def test_only_a_page_a_browser_opens_takes_the_token_in_its_address() -> None:
    def ask(handler: Any, query: dict[str, str], headers: dict[str, str] | None = None) -> int:
        return asyncio.run(handler(FakeWeb(), QueryRequest(headers or {}, query)))[0]

    json_page, browser_page = guarded("s3cret")(page), guarded("s3cret", in_query=True)(page)
    assert ask(json_page, {"token": "s3cret"}) == 401  # the JSON pages want the header
    assert ask(browser_page, {"token": "s3cret"}) == 200
    assert ask(browser_page, {"token": "wrong"}) == 401 and ask(browser_page, {}) == 401
    assert ask(browser_page, {}, {"Authorization": "Bearer s3cret"}) == 200
    # a wrong header is not rescued by a right query token
    assert ask(browser_page, {"token": "s3cret"}, {"Authorization": "Bearer x"}) == 401
