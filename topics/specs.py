"""Topic specifications: what a topic must look like, independent of any Kafka client.

Declaring topics as data lets the runtime create them idempotently and lets tests and tools
check that an existing topic is fit for use (enough partitions, right cleanup policy).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["TopicSpec"]

_LEGAL_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


@dataclass(frozen=True)
class TopicSpec:
    """A topic: name, partition count, key field, cleanup policy, retention, extra configs.

    ``key`` names the record field messages are keyed (and so partitioned) by; it is metadata for
    producers, not a Kafka setting. ``compacted`` selects ``cleanup.policy=compact`` (changelogs);
    ``retention_ms`` sets ``retention.ms`` (-1: keep forever). ``config`` holds any other topic
    configs; it may repeat the two derived ones only with the same value.
    """

    name: str
    partitions: int = 1
    key: str | None = None
    compacted: bool = False
    retention_ms: int | None = None
    config: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not _LEGAL_NAME.fullmatch(self.name) or self.name in (".", ".."):
            raise ValueError(
                f"illegal topic name {self.name!r}: use 1-249 of [A-Za-z0-9._-], not '.' or '..'"
            )
        parts = self.partitions
        if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
            raise ValueError(f"topic {self.name}: partitions must be an int >= 1, not {parts!r}")
        if self.retention_ms is not None and (
            isinstance(self.retention_ms, bool)
            or not isinstance(self.retention_ms, int)
            or self.retention_ms < -1
        ):
            raise ValueError(f"topic {self.name}: retention_ms must be an int >= -1 or None")
        for name, value in self.config.items():
            if not isinstance(name, str) or not isinstance(value, str):
                raise ValueError(f"topic {self.name}: config {name!r}={value!r} must be str=str")
        derived = self._derived()
        for name, value in derived.items():
            if name in self.config and self.config[name] != value:
                raise ValueError(
                    f"topic {self.name}: config {name}={self.config[name]!r} contradicts "
                    f"the spec ({name}={value!r})"
                )
        # Frozen means frozen: nobody changes a shared spec's config behind its back.
        object.__setattr__(self, "config", MappingProxyType(dict(self.config)))

    def _derived(self) -> dict[str, str]:
        cfg = {"cleanup.policy": "compact" if self.compacted else "delete"}
        if self.retention_ms is not None:
            cfg["retention.ms"] = str(self.retention_ms)
        return cfg

    def kafka_config(self) -> dict[str, str]:
        """Topic configs to create the topic with."""
        return {**self._derived(), **self.config}
