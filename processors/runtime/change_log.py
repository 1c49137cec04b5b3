"""The recent run-time changes of a worker-wide party (scheduling priorities and policies, drop
box shares): kept for the status page, each reported once as an event on the stats topic."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

#: changes kept for the status page
KEPT = 20


class ChangeLog:
    def __init__(self) -> None:
        self._changes: list[dict[str, Any]] = []

    def record(self, change: dict[str, Any]) -> None:
        self._changes = [*self._changes[-(KEPT - 1) :], change]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.entries())

    def entries(self) -> list[dict[str, Any]]:
        """The kept changes, oldest first (for the status page)."""
        return [{k: v for k, v in c.items() if k != "reported"} for c in self._changes]

    def unreported(self) -> list[dict[str, Any]]:
        """Changes since the last call, as JSON-able dicts (for the stats topic)."""
        out = [{k: v for k, v in c.items() if k != "reported"} for c in self._changes
               if not c.get("reported")]  # fmt: skip
        for c in self._changes:
            c["reported"] = True
        return json.loads(json.dumps(out))  # type: ignore[no-any-return]
