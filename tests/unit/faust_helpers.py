"""Shared helpers of the faust_bulk tests: the failure message, fake records, a real consumer.

Imports of the Faust internals happen here, so that a missing module or name fails loudly with a
message naming it instead of as a bare collection error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import pytest

__all__ = [
    "BULK_TOPIC", "OTHER_TOPIC", "TESTED_FAUST", "BulkApp", "BulkConsumer", "BulkTransport",
    "ConsumerMessage", "ConsumerRecord", "ConsumerStoppedError", "RecordBlock", "TP",
    "ack_taken", "faust_aiokafka", "faust_base", "faust_consumer", "get_codec", "make_consumer",
    "no_op", "paused_buffer", "record", "relied_on", "resume_drained", "run", "take_waiting",
]  # fmt: skip

T = TypeVar("T")
TESTED_FAUST = "0.15."
BULK_TOPIC = "readings"
OTHER_TOPIC = "envelopes"


def relied_on(name: str, problem: str) -> str:
    """The failure message: which internal changed, and that faust_bulk relies on it."""
    return (
        f"Faust internal {name} {problem}; faust_bulk relies on it "
        "(processors/runtime/faust_bulk.py): adapt faust_bulk to this Faust and re-run the "
        "integration tests (tests/integration) before upgrading"
    )


try:  # a missing module or name must fail loudly, not as a bare collection ImportError
    from aiokafka.errors import ConsumerStoppedError
    from aiokafka.structs import ConsumerRecord
    from faust.serializers.codecs import get_codec
    from faust.transport import base as faust_base
    from faust.transport import consumer as faust_consumer
    from faust.transport.drivers import aiokafka as faust_aiokafka
    from faust.types import TP
    from faust.types.tuples import ConsumerMessage

    from processors.runtime.faust_bulk import (
        BulkApp,
        BulkConsumer,
        BulkTransport,
        ack_taken,
        resume_drained,
        take_waiting,
    )
    from processors.runtime.record_block import RecordBlock
except ImportError as exc:
    pytest.fail(relied_on(f"import ({exc})", "failed"), pytrace=False)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on a fresh event loop (no pytest-asyncio here)."""
    return asyncio.run(coro)


def record(offset: int, value: bytes | None = b"v", topic: str = BULK_TOPIC) -> ConsumerRecord:
    """An aiokafka record as the driver's fetcher returns it."""
    size = 0 if value is None else len(value)
    return ConsumerRecord(topic, 0, offset, 1000 * offset, 0, b"k", value, None, 1, size, [])


async def no_op(*_: Any) -> None:
    """A rebalance callback that does nothing."""


def make_consumer(
    callback: Callable[[Any], Awaitable[None]] | None = None,
) -> tuple[BulkApp, BulkConsumer]:
    """A BulkApp on an unreachable broker and its (never started) consumer; call inside a loop."""
    app = BulkApp(
        "faust-bulk-contract",
        broker="kafka://localhost:1",
        bulk_topics=[BULK_TOPIC],
        value_serializer="raw",
        key_serializer="raw",
    )
    consumer = app._new_transport().create_consumer(
        callback=callback or no_op, on_partitions_revoked=no_op, on_partitions_assigned=no_op
    )
    assert isinstance(consumer, BulkConsumer)
    return app, consumer


def paused_buffer(partitions: int = 4, events: int = 30) -> tuple[Any, list[int]]:
    """An agent's buffer as the conductor fills it: one pressure-drop callback per partition,
    ``events`` events round the partitions; the partitions resumed are recorded."""
    from mode.utils.queues import FlowControlEvent, ThrowableQueue

    resumed: list[int] = []
    drops = [lambda p=p: resumed.append(p) for p in range(partitions)]
    queue: Any = ThrowableQueue(maxsize=32, flow_control=FlowControlEvent())
    for i in range(events):
        queue.put_nowait_enhanced(i, on_pressure_high=lambda: None,
                                  on_pressure_drop=drops[i % partitions])  # fmt: skip
    return queue, resumed
