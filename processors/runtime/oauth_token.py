"""OAUTHBEARER tokens for aiokafka (Faust): the OAuth 2 client-credentials grant.

librdkafka fetches its own tokens (``sasl.oauthbearer.method=oidc``); aiokafka needs a token
provider object, and this one asks the same token endpoint with the same client id and secret,
so both client libraries authenticate alike.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
import urllib.request

from aiokafka.conn import AbstractTokenProvider

#: refresh this long before the token expires
_MARGIN_S = 30.0


class ClientCredentialsToken(AbstractTokenProvider):
    """Fetches and caches an access token; the secret is never part of its repr."""

    def __init__(self, url: str, client_id: str, secret: str, scope: str | None) -> None:
        self._url, self._client_id, self._secret, self._scope = url, client_id, secret, scope
        self._token: str | None = None
        self._expires = 0.0

    def __repr__(self) -> str:
        return f"ClientCredentialsToken(url={self._url!r}, client_id={self._client_id!r})"

    async def token(self) -> str:
        if self._token is None or time.monotonic() > self._expires - _MARGIN_S:
            self._token, lifetime = await asyncio.to_thread(self._fetch)
            self._expires = time.monotonic() + lifetime
        return self._token

    def _fetch(self) -> tuple[str, float]:
        form = {"grant_type": "client_credentials", "client_id": self._client_id,
                "client_secret": self._secret}  # fmt: skip
        if self._scope:
            form["scope"] = self._scope
        request = urllib.request.Request(
            self._url, data=urllib.parse.urlencode(form).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (configured URL)
            body = json.loads(response.read())
        return str(body["access_token"]), float(body.get("expires_in", 300))
