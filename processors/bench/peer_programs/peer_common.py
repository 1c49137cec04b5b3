"""Shared by the peer programs (which must not import streamon): result lines, filters and the
Quix application's settings."""

from __future__ import annotations

import json
import logging
import operator
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

_OPS: dict[str, Callable[[Any, Any], bool]] = {">": operator.gt, "<": operator.lt,
                                               "==": operator.eq}  # fmt: skip


def emit(result: dict[str, Any]) -> None:
    """The one line the bench reads (epoch seconds for every time); written to descriptor 1
    itself, since Faust routes ``print`` into its logging."""
    os.write(1, ("RESULT " + json.dumps(result) + "\n").encode())


def now() -> float:
    return time.time()


def make_filter(spec: Sequence[Sequence[Any]]) -> Callable[[dict[str, Any]], bool]:
    """A predicate over a decoded record from the bench's filter list (field, op, constant):
    plain closures over operator functions, evaluated in order with early exit."""
    tests: list[Callable[[dict[str, Any]], bool]] = []
    for field, op, value in spec:
        if op == "between":
            lo, hi = value
            tests.append(lambda r, f=field, lo=lo, hi=hi: lo <= r[f] <= hi)
        elif op == "in":
            members = frozenset(value)
            tests.append(lambda r, f=field, m=members: r[f] in m)
        else:
            fn = _OPS[op]
            tests.append(lambda r, f=field, fn=fn, c=value: fn(r[f], c))

    def passes(record: dict[str, Any]) -> bool:
        return all(t(record) for t in tests)

    return passes


def fail(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
    sys.exit(2)


def quix_application(spec: dict[str, Any], **extra: Any) -> Any:
    """The Quix Streams ``Application`` both Quix programs run: the spec's broker and group,
    from the earliest offset, the broker's short session timeout (DESIGN.md), no topic or
    changelog created behind the bench's back; ``extra`` adds settings (``state_dir``)."""
    from quixstreams import Application

    return Application(
        broker_address=spec["bootstrap"],
        consumer_group=spec["group"],
        auto_offset_reset="earliest",
        consumer_extra_config={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1500},
        loglevel=logging.WARNING,
        auto_create_topics=False,
        use_changelog_topics=False,
        **extra,
    )
