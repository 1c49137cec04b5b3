"""Who may read a worker's web endpoints (status, plan, explain, metrics).

A worker serves them on 127.0.0.1 unless ``--web-host`` names another address (a container
network, say). Beyond loopback a bearer token can be required: set ``STREAMON_WEB_TOKEN`` and
every request must carry ``Authorization: Bearer <token>`` (compared in constant time), or it
gets 401. Prometheus sends it with ``authorization: {credentials: ...}`` in its scrape config.
A browser cannot send a header when it opens a page, so the plan page (``/``) alone also takes
the token as ``?token=``; its script sends it as the header of every request it makes after.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)

ENV_WEB_TOKEN = "STREAMON_WEB_TOKEN"
Handler = Callable[[Any, Any], Awaitable[Any]]


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) only listens on this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, token: str | None) -> None:
    """Say so when the endpoints leave loopback without a token (allowed: a private container
    network may be trusted; a user should know)."""
    if not is_loopback(host) and not token:
        log.warning("web endpoints on %s without a token: anyone who reaches that address reads "
                    "the worker's status and metrics (set %s to require one)", host,
                    ENV_WEB_TOKEN)  # fmt: skip


def guarded(token: str | None, in_query: bool = False) -> Callable[[Handler], Handler]:
    """A decorator for Faust page handlers: with a token, requests without it get 401.
    ``in_query``: the token may also come as ``?token=`` (a page a browser opens)."""

    def wrap(handler: Handler) -> Handler:
        if not token:
            return handler
        expected = f"Bearer {token}".encode()

        async def checked(web: Any, request: Any) -> Any:
            given = str(request.headers.get("Authorization", "")).encode()
            if in_query and not given:
                query = getattr(request, "query", None) or {}
                given = f"Bearer {query.get('token', '')}".encode()
            if not hmac.compare_digest(given, expected):
                return web.json({"error": "missing or wrong bearer token"}, status=401)
            return await handler(web, request)

        checked.__name__ = handler.__name__
        checked.__doc__ = handler.__doc__
        return checked

    return wrap
