"""What every agent of a worker shares: the context, the output path, and the three ways an agent
stops the worker (output that cannot be written; state that cannot be restored; an exception
nobody foresaw, which :func:`guard_agent` turns into a stop instead of Faust's ack and restart).

Failures split in two. Input that cannot be decoded or processed is data: it becomes a dead
letter with the reason and the agent carries on. Output that cannot be written is not: Faust
acks an event even when the agent raises, so carrying on could commit past lost output; the
worker exits at once instead, without committing, and the input is delivered again on restart
(exit 75; a dead letter that cannot be written counts as output). Neither is an exception
escaping an agent: the worker exits with 70, naming the agent and the input it was on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Sized
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from processors.core.batch import Batch
from processors.core.scheduling.config import DEFAULT_GRANT_TUPLES, DEFAULT_QUANTUM_MS
from processors.runtime.arbiter import Arbiter
from processors.runtime.deadletter import DeadLetterError, DeadLetters
from processors.runtime.faust_bulk import BulkApp
from processors.runtime.producer import RecordProducer
from processors.runtime.record_block import RecordBlock
from processors.runtime.stats import AgentStats, StatsBoard
from topics.envelope import encode_envelopes

if TYPE_CHECKING:
    from processors.runtime.backpressure import MemoryLimit
    from processors.runtime.exactly_once import ExactlyOnce
    from processors.runtime.restore import Restorer
    from processors.runtime.shedding import Shedding

log = logging.getLogger(__name__)

#: what ``emit`` returns: tuples and bytes written
Written = tuple[int, int]

#: Exit status of a worker whose stored state cannot be restored (EX_CONFIG: an operator must
#: decide; ``streamon worker --reset-state`` starts such partitions empty).
EXIT_BAD_STATE = 78


def stop_worker(message: str, code: int) -> NoReturn:
    """Stop the process now, committing nothing, after logging ``message``."""
    log.critical("%s", message)
    logging.shutdown()
    os._exit(code)


#: Exit status of a worker that could not write its output (a supervisor should restart it).
EXIT_OUTPUT_FAILED = 75


#: run before a stop for unwritten output: one may stop the worker with the cause instead
#: (topics the broker lost: :mod:`processors.runtime.topics_watch`)
_BEFORE_OUTPUT_STOP: list[Callable[[], None]] = []


def before_output_stop(check: Callable[[], None]) -> None:
    """Run ``check`` before :func:`fatal` stops the worker (it may stop it with a better reason)."""
    _BEFORE_OUTPUT_STOP.append(check)


def fatal(agent: str, exc: BaseException) -> NoReturn:
    """Stop the process now, committing nothing, so that unwritten output is redone."""
    for check in _BEFORE_OUTPUT_STOP:
        with contextlib.suppress(Exception):
            check()
    stop_worker(
        f"agent {agent} could not write its output, exiting without commit: {exc!r}",
        EXIT_OUTPUT_FAILED,
    )


#: Exit status of a worker whose agent raised an exception nobody foresaw (EX_SOFTWARE: a bug;
#: the input it was processing is not committed and comes again after a restart).
EXIT_AGENT_FAILED = 70


@dataclass
class Cursor:
    """The input an agent is processing, for the message of a stop."""

    topic: str = "?"
    partition: int = -1
    first: int = -1
    last: int = -1

    def at(self, topic: str, partition: int, first: int, last: int | None = None) -> None:
        self.topic, self.partition, self.first = topic, partition, first
        self.last = first if last is None else last

    def __str__(self) -> str:
        span = f"{self.first}" if self.first == self.last else f"{self.first}..{self.last}"
        return f"{self.topic}[{self.partition}]@{span}"


def guard_agent(
    name: str, body: Callable[[Any, Cursor], Awaitable[None]]
) -> Callable[[Any], Awaitable[None]]:
    """An agent function running ``body(stream, cursor)``; an exception escaping it stops the
    worker without commit (exit 70), naming the agent, its input position and the exception.

    Faust would acknowledge the event an agent raised on and restart the agent: its input
    would be committed with no result and no dead letter.
    """

    async def agent(stream: Any) -> None:
        cursor = Cursor()
        try:
            await body(stream, cursor)
        except Exception as exc:
            log.exception("agent %s failed on %s", name, cursor)
            stop_worker(
                f"agent {name} failed on input {cursor} with {exc!r}; exiting without commit "
                "(the input comes again after a restart)",
                EXIT_AGENT_FAILED,
            )

    agent.__name__ = agent.__qualname__ = f"agent_{name}".replace(".", "_")
    return agent


@dataclass
class AgentContext:
    """What every agent of one worker shares."""

    app: BulkApp
    board: StatsBoard
    dead_letters: DeadLetters
    #: where outputs go: the worker's producer, or in exactly-once mode the commit protocol
    producer: RecordProducer | ExactlyOnce
    #: who processes next (disabled: Faust's own order)
    arbiter: Arbiter = field(default_factory=lambda: Arbiter(enabled=False))
    #: most tuples (or records) an agent processes per turn
    grant_tuples: int = DEFAULT_GRANT_TUPLES
    #: how long a turn should last: an agent's turn holds about this much of its measured work
    quantum_s: float = DEFAULT_QUANTUM_MS / 1000.0
    #: the exactly-once commit protocol (None: at-least-once)
    eo: ExactlyOnce | None = None
    #: the query's memory limit, kept by pausing inputs that run ahead (stateful plans)
    memory: MemoryLimit | None = None
    #: restores stateful units off the event loop when their partitions are assigned
    restorer: Restorer | None = None
    #: the drop boxes on the inputs (load shedding; keep everything unless told otherwise)
    shedding: Shedding | None = None

    def unit(self, agent: str, partition: int) -> AbstractContextManager[None]:
        """Around the synchronous code that processes ``agent``'s input of ``partition``: in
        exactly-once mode, what it produces belongs to that unit's epoch."""
        return self.eo.unit(agent, partition) if self.eo is not None else contextlib.nullcontext()

    def done(self, agent: str, partition: int, topic: str, next_offset: int) -> None:
        """A stateless unit processed its input up to ``next_offset`` (exclusive)."""
        if self.eo is not None:
            self.eo.done(agent, partition, topic, next_offset)

    def floor(self, agent: str, topic: str, partition: int) -> int:
        """Input of ``topic[partition]`` below this offset is already committed: skip it."""
        return 0 if self.eo is None else self.eo.floor(agent, topic, partition)

    def register(self, agent: str, in_topics: Iterable[str], units: Any = None) -> None:
        """An agent's outputs go through the exactly-once protocol, if there is one."""
        if self.eo is not None:
            self.eo.register(agent, in_topics, units)

    def turn_tuples(self, stats: AgentStats, cap: int | None = None) -> int:
        """Tuples for the agent's next turn: a quantum of its measured per-tuple time, at least
        one, at most ``grant_tuples`` (and ``cap``). Without an arbiter, no limit but ``cap``."""
        most = self.grant_tuples if cap is None else min(cap, self.grant_tuples)
        if not self.arbiter.enabled:
            return cap if cap is not None else 1 << 62
        per_tuple_s = stats.ns_per_tuple / 1e9
        if per_tuple_s <= 0:
            return most
        return max(1, min(most, int(self.quantum_s / per_tuple_s)))

    def send_envelopes(
        self, agent: str, topic: str, batch: Batch, partition: int, arrival_ms: int | None = None
    ) -> int:
        """Queue ``batch`` as envelopes on ``topic`` (timestamped with the arrival of its oldest
        input tuple); delivery is checked before commits. Returns the bytes queued."""
        written = 0
        try:
            for payload in encode_envelopes(batch):
                self.producer.produce(topic, payload, partition=partition, timestamp_ms=arrival_ms)
                written += len(payload)
        except Exception as exc:
            fatal(agent, exc)
        return written

    def emit(
        self,
        agent: str,
        topic: str,
        outputs: list[Batch],
        partition: int,
        arrival_ms: int | None = None,
    ) -> Written:
        """Queue every non-empty batch of ``outputs`` on ``topic``'s ``partition``; returns the
        tuples and bytes queued (what an agent's statistics count as its output)."""
        written = 0
        for output in outputs:
            if len(output):
                written += self.send_envelopes(agent, topic, output, partition, arrival_ms)
        return sum(len(o) for o in outputs), written

    def dead_letter(
        self,
        agent: str,
        *,
        source_topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        reason: str,
    ) -> None:
        """One dead letter from ``agent``; one that cannot be written stops the worker."""
        try:
            self.dead_letters.send(
                source_topic=source_topic, partition=partition, offset=offset, key=key,
                value=value, reason=reason, stage=agent,
            )  # fmt: skip
        except DeadLetterError as exc:
            fatal(agent, exc)

    async def flush(self) -> None:
        """The commit hook: every output acknowledged, or the process ends without commit."""
        try:
            await self.producer.flush()
        except Exception as exc:
            fatal("output producer", exc)


#: delivered blocks an agent takes in one go (faust_bulk.take_waiting), the one Faust hands it
#: aside: at most the worker's stream buffer holds
WAITING_BLOCKS = 64

T = TypeVar("T", bound=Sized)


def tuple_runs(items: list[T], limit: int) -> list[list[T]]:
    """``items`` in consecutive runs of at most ``limit`` tuples (an item larger than that is
    a run of its own): what one arbiter turn does of several blocks."""
    runs: list[list[T]] = []
    size = limit
    for item in items:
        if size + len(item) > limit or not runs:
            runs.append([])
            size = 0
        runs[-1].append(item)
        size += len(item)
    return runs


def earliest(*arrivals_ms: int | None) -> int | None:
    """The earliest of several arrival times in ms (None: none is known)."""
    known = [a for a in arrivals_ms if a is not None]
    return min(known) if known else None


def arrival_s(arrival_ms: int | float | None) -> float:
    """An arrival time in seconds for the arbiter: never in the future, now when unknown."""
    now = time.time()
    if arrival_ms is None or arrival_ms <= 0:
        return now
    return min(arrival_ms / 1000.0, now)


def block_dead_letter(
    ctx: AgentContext, name: str, block: RecordBlock, index: int, reason: str
) -> None:
    """Record ``index`` of a fetched block goes to the dead-letter topic with its reason."""
    ctx.dead_letter(
        name,
        source_topic=block.topic,
        partition=block.partition,
        offset=block.offsets[index],
        key=block.keys[index],
        value=block.values[index],
        reason=reason,
    )
