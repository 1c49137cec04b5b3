"""Bulk receive for Faust: one event per fetched partition batch instead of one per record.

Plain Faust spends 100-200 µs of CPU per event; external topics carry one small Avro record per
message, so a stock agent tops out near 10k records/s. This module keeps Faust's agents, streams,
acks and commits, and changes only how the consumer hands fetched records to the conductor: for
the topics named "bulk", every run of records fetched from one partition becomes a single
:class:`RecordBlock` message, and the offsets it covers below its last one are registered in the
consumer's gap tracker, so acking the block's event commits the whole run.

**Everything in streamon that touches Faust internals lives here.** It relies on:

- ``faust.transport.drivers.aiokafka.Consumer`` and ``Transport`` (subclassed);
- private consumer members: ``_drain_messages`` and ``_new_offset`` (replaced; the latter
  keeps Faust's semantics on intervals), ``_acked``, ``_acked_index``, ``_gap``,
  ``_committed_offset``, ``_wait_next_records``,
  ``_to_message``, ``_read_offset``, ``_add_gap``, ``_n_acked``, ``_commit_every``,
  ``_commit`` (wrapped, to flush external producers before offsets are committed),
  ``scheduler``, ``flow_active``, ``callback``, ``consumer_stopped_errors``, ``diag``;
- ``faust.types.tuples.ConsumerMessage``'s constructor;
- the ``raw`` value serializer passing non-bytes values through untouched;
- ``App._new_transport`` (overridden to install the transport);
- ``App._new_web`` and the web driver's ``production_blueprints`` (emptied, so that Faust's
  own index, ``{"status": "OK"}``, leaves ``/`` to the worker's plan page);
- an agent stream's ``channel.queue`` (its buffer of delivered events), ``Message.tracked``,
  ``Consumer.track_message``, ``Event.ack``, ``App.flow_control``, ``App.sensors``, as Faust's
  stream iterator uses them (:func:`take_waiting`), and mode's ``FlowControlQueue``
  ``_pending_pressure_drop_callbacks``, ``pressure_drop_size`` and
  ``maybe_endorse_pressure_drop`` (:func:`resume_drained`);
- ``Consumer.pause_partitions``/``resume_partitions``/``_buffered_partitions``
  (backpressure, :meth:`BulkConsumer.hold_back`; a restore, :meth:`BulkConsumer.hold_for_restore`,
  with ``resume_partitions`` wrapped because Faust's recovery calls it for the whole assignment
  at the end of every rebalance);
- ``Consumer._new_consumer_thread`` and ``AIOKafkaConsumerThread._create_worker_consumer``
  (wrapped), and aiokafka's ``AIOKafkaConsumer._fetch_max_wait_ms``: Faust hard-codes a 1.5 s
  fetch wait, and a fetch for partitions without data then holds back every partition of the
  broker for that long (the latency floor of each internal hop); ``fetch_wait_ms`` lowers it.

- mode's ``Worker._on_sigterm`` and ``_on_sigint`` (what its signal handlers call; overridden by
  :class:`StoppableWorker`).

``tests/unit/test_faust_bulk_contract.py`` checks each of these, and the integration tests check
the behaviour (exact counts across restarts); a Faust upgrade that breaks them fails loudly.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import os
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import faust
from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from faust.types.tuples import ConsumerMessage

from processors.runtime import fetch_runs

#: Called before offsets are committed; must make every output of the acked events durable.
FlushHook = Callable[[], Awaitable[None]]
#: The highest offset that may be committed for a partition (None: no limit). Exactly-once mode
#: stores input positions itself; the group's offsets must never run ahead of them.
CommitCap = Callable[[TP], int | None]


def take_waiting(stream: Any, limit: int) -> list[Any]:
    """Up to ``limit`` events already delivered to an agent's ``stream`` and waiting in its
    buffer, taken at once; the caller acks them with :func:`ack_taken` once processed.

    Faust's stream iterator yields to the event loop before every event, so an agent takes one
    event per loop cycle. Every other agent's turn comes in between, and a cheap agent (ingest:
    0.5 ms a block) waited 100-200 ms in its buffer behind a join's turns (docs/benchmarks.md,
    "Where the join's second went"). Taken here, the events are tracked as the iterator
    tracks them (pending acks); events of an earlier consumer generation (a rebalance began)
    are acked and dropped, as the iterator drops them.
    """
    channel = getattr(stream, "channel", None)
    if channel is None:  # not a Faust stream (an agent driven directly): nothing waits
        return []
    queue = channel.queue
    app = stream.app
    taken: list[Any] = []
    while len(taken) < limit and not queue.empty() and not queue._errors:
        event = queue.get_nowait()
        message = getattr(event, "message", None)
        if message is None:  # not an event of a topic: a plain value
            taken.append(event)
            continue
        if not app.flow_control.is_active() or (
            message.generation_id != app.consumer_generation_id
        ):
            ack_taken([event])
            continue
        if app.topics.acks_enabled_for(message.topic) and not message.tracked:
            message.tracked = True
            app.consumer.track_message(message)
        taken.append(event)
    resume_drained(queue)
    return taken


def resume_drained(queue: Any) -> None:
    """Resume every partition the agent's buffer paused once it holds no more than its
    pressure-drop size, as its own ``get`` does when it finds the buffer empty.

    mode's ``FlowControlQueue`` pauses a partition whose events arrive while the buffer is
    over its high mark and resumes one paused partition per ``get_nowait`` at or under the
    drop size, the rest only at a ``get`` of an empty buffer. Taken in bulk here, a drained
    buffer left partitions paused while the agent worked on: in a capacity burst of
    ``bench latency`` eight partitions went unfetched for 1.9 s (docs/benchmarks.md, "The
    capacity burst on the paced phase's work"). The bound is Faust's still: nothing resumes
    above the drop size."""
    pending = queue._pending_pressure_drop_callbacks
    while pending and queue.qsize() <= queue.pressure_drop_size:
        before = len(pending)
        queue.maybe_endorse_pressure_drop()
        if len(pending) >= before:
            return


def ack_taken(events: Iterable[Any]) -> None:
    """Ack events :func:`take_waiting` took: their offsets may be committed from now on."""
    for event in events:
        message = getattr(event, "message", None)
        if message is not None and event.ack():  # the last stream to ack it
            event.app.sensors.on_message_out(message.tp, message.offset, message)


class _ShortWaitConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's consumer thread, with the fetch wait of the worker consumer set by the app."""

    fetch_wait_ms: int = 1500

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        consumer._fetch_max_wait_ms = self.fetch_wait_ms  # read when the consumer starts
        return consumer


class BulkConsumer(faust_aiokafka.Consumer):
    """aiokafka-driver consumer that delivers bulk topics as RecordBlock events."""

    bulk_topics: frozenset[str] = frozenset()
    flush_hooks: list[FlushHook] = []
    fetch_wait_ms: int = 1500
    commit_cap: CommitCap | None = None
    #: True while the records of one fetch are being handed to the agents (the arbiter waits
    #: for the round to finish, so that every agent with input competes for the next turn)
    delivering: bool = False

    @property
    def held_back(self) -> set[TP]:
        """Partitions held back by :meth:`hold_back`."""
        if "_held_back" not in self.__dict__:
            self.__dict__["_held_back"] = set()
        return self.__dict__["_held_back"]

    def _new_consumer_thread(self) -> Any:
        thread_cls = type(
            "AppConsumerThread", (_ShortWaitConsumerThread,), {"fetch_wait_ms": self.fetch_wait_ms}
        )
        return thread_cls(self, loop=self.loop, beacon=self.beacon)

    async def _commit(self, offsets: Any) -> bool:
        # Outputs written with clients Faust does not know (the sink's producer) must be durable
        # before the offsets of the events that produced them are committed (at-least-once).
        for hook in self.flush_hooks:
            await hook()
        return await super()._commit(offsets)

    def committed_position(self, tp: TP) -> int | None:
        """The group's committed offset of ``tp`` (the next to read) as of the last seek or
        commit; None when unknown or 0. An agent that has processed nothing of ``tp`` since
        the assignment stands there."""
        return self._committed_offset.get(tp)

    def _new_offset(self, tp: TP) -> int | None:  # replaces Consumer._new_offset
        """The offset to commit: the end of the first run of done offsets, or None.

        Same answer as Faust's, computed on intervals: Faust expands every gap interval into
        single offsets and groups them in Python at each commit, which costs about 0.4 µs per
        record of a bulk block (several % of a core at 200k records/s). Here the acked offsets
        (one per event) and the gap intervals are merged as ranges.
        """
        acked = self._acked[tp]
        if not acked:
            return None
        acked.sort()
        runs = [(offset, offset + 1) for offset in acked]
        gap = self._gap[tp]
        if gap:
            runs.extend((iv.begin, iv.end) for iv in gap.overlap(0, acked[-1]))
            runs.sort()
        start, end = runs[0]
        committed = self._committed_offset[tp]
        if committed and start - committed > 1:
            return None  # the offsets right after the committed one are not done yet
        for begin, stop in runs[1:]:
            if begin > end:
                break
            end = max(end, stop)
        cap = self.commit_cap(tp) if self.commit_cap is not None else None
        if cap is not None:  # exactly-once: never past what the commit protocol stored
            if cap <= (committed or 0) or cap <= start:
                return None
            end = min(end, cap)
        done = bisect.bisect_left(acked, end)
        self._acked_index[tp].difference_update(acked[:done])
        del acked[:done]
        if gap:
            gap.chop(0, end)
        return end

    async def _drain_messages(self, fetcher: Any) -> None:  # replaces Consumer._drain_messages
        consumer_should_stop = self._stopped.is_set
        fetcher_should_stop = fetcher._stopped.is_set
        try:
            while not (consumer_should_stop() or fetcher_should_stop()):
                self.diag.set_flag(CONSUMER_FETCHING)
                records, active = await self._wait_next_records(1.0)
                await self.sleep(0)
                if records and not self.should_stop:
                    self.delivering = True
                    try:
                        await self._deliver(records, active)
                    finally:
                        self.delivering = False
                self.diag.unset_flag(CONSUMER_FETCHING)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                return
            raise
        finally:
            self.diag.unset_flag(CONSUMER_FETCHING)

    async def _deliver(self, records: dict[TP, list[Any]], active: set[TP] | None) -> None:
        generation_id = self.app.consumer_generation_id
        if not self.flow_active:
            await self.perform_seek()
            return
        for tp, batch in records.items():
            if self._interrupted(generation_id):
                return  # rebalance: the rest is fetched again from committed offsets
            # a partition held back after its records were fetched gets them all the same (a
            # unit whose restore is still running then restores itself, on the event loop)
            inactive = active is not None and tp not in active
            if inactive and not (
                tp in self._buffered_partitions or tp in self.held_back or tp in self.restoring
            ):
                continue
            self.app.monitor.track_tp_end_offset(tp, self.highwater(tp))
            if tp.topic in self.bulk_topics:
                await self._deliver_block(tp, batch, generation_id)
            else:
                await self._deliver_each(tp, batch, generation_id)

    def hold_back(self, tps: Iterable[TP]) -> None:
        """Stop fetching ``tps`` (backpressure) until :meth:`let_go`; records fetched before
        are still delivered (Faust's own pause would skip them)."""
        tpset = set(tps)
        self.held_back.update(tpset)
        self.pause_partitions(tpset)

    def let_go(self, tps: Iterable[TP]) -> None:
        tpset = set(tps) & self.held_back
        self.held_back.difference_update(tpset)
        self.resume_partitions(tpset & set(self.assignment()))

    @property
    def restoring(self) -> dict[TP, int]:
        """Partitions held back while their units' state is restored, by restore pass."""
        if "_restoring" not in self.__dict__:
            self.__dict__["_restoring"] = {}
        return self.__dict__["_restoring"]

    def hold_for_restore(self, tps: Iterable[TP], restore_pass: int) -> None:
        """Stop fetching ``tps`` until ``restore_pass`` calls :meth:`restore_ended`: not even
        Faust's resumption at the end of a rebalance lets them go (:meth:`resume_partitions`)."""
        tpset = set(tps)
        self.restoring.update(dict.fromkeys(tpset, restore_pass))
        self.pause_partitions(tpset)

    def restore_ended(self, tps: Iterable[TP], restore_pass: int) -> None:
        """Let go of the partitions ``restore_pass`` held (not those a later pass holds again,
        nor those backpressure holds back); revoked ones stay paused for their next owner."""
        mine = {tp for tp in tps if self.restoring.get(tp) == restore_pass}
        for tp in mine:
            del self.restoring[tp]
        try:
            held = set(self.assignment())
        except Exception:  # the consumer is stopping: nothing to let go
            return
        self.resume_partitions((mine - self.held_back) & held)

    def resume_partitions(self, tps: Iterable[TP]) -> None:  # wraps Consumer.resume_partitions
        super().resume_partitions(set(tps) - set(self.restoring))

    def _interrupted(self, generation_id: int) -> bool:
        """A rebalance began: stop delivering (what was not delivered is fetched again)."""
        return not self.flow_active or self.app.consumer_generation_id != generation_id

    async def _deliver_each(
        self, tp: TP, batch: Iterable[Any], generation_id: int | None = None
    ) -> None:
        """Stock behaviour, one event per record (envelope, stats and control topics)."""
        if generation_id is None:
            generation_id = self.app.consumer_generation_id
        acks_enabled = self.app.topics.acks_enabled_for(tp.topic)
        for n, record in enumerate(batch):
            if self._interrupted(generation_id):
                return
            if n and n % 100 == 0:
                await asyncio.sleep(0)
            r_offset = self._read_offset[tp]
            offset = record.offset
            if r_offset is not None and offset < r_offset:
                continue
            if acks_enabled and r_offset and offset - r_offset > 1:
                await self._add_gap(tp, r_offset + 1, offset)
            await self._maybe_commit()
            await self.wait_first(
                self.callback(self._to_message(tp, record)), self.suspend_flow.wait()
            )
            self._read_offset[tp] = offset

    def _add_block_gap(self, tp: TP, offset_from: int, offset_to: int) -> None:
        """Faust's ``Consumer._add_gap`` for a block, without its ``merge_overlaps``: that
        rebuilds the whole interval tree of the partition at every block (4.5% of a join
        worker's event loop at 15,000 records/s, py-spy). :meth:`_new_offset` reads the
        intervals as ranges, merged or not, and chops them off at each commit, so the tree
        holds the blocks since the last commit."""
        committed = self._committed_offset[tp]
        if committed is not None:
            offset_from = max(offset_from, committed + 1)
        if offset_from <= offset_to:  # the tree's intervals exclude their end
            self._gap[tp].addi(offset_from, offset_to + 1)

    async def _deliver_block(self, tp: TP, batch: list[Any], generation_id: int) -> None:
        r_offset = self._read_offset[tp]
        if not batch:
            return
        block = fetch_runs.block_of(tp.topic, tp.partition, batch)
        if r_offset is not None:
            block = block.from_offset(r_offset)  # re-fetched after a seek
        if not len(block):
            return
        first, last = block.offsets[0], block.offsets[-1]
        gap_from = r_offset + 1 if r_offset else first
        if gap_from <= last - 1 and self.app.topics.acks_enabled_for(tp.topic):
            self._add_block_gap(tp, gap_from, last - 1)
        tail_ts = block.timestamps[-1]
        message = ConsumerMessage(
            tp.topic,
            tp.partition,
            last,
            tail_ts / 1000.0 if tail_ts is not None and tail_ts >= 0 else None,
            batch[-1].timestamp_type,
            (),
            None,
            block,
            None,
            0,
            block.serialized_size(),
            tp,
            generation_id=generation_id,
        )
        await self._maybe_commit()
        await self.wait_first(self.callback(message), self.suspend_flow.wait())
        self._read_offset[tp] = last

    async def _maybe_commit(self) -> None:
        if self._commit_every is not None and self._n_acked >= self._commit_every:
            self._n_acked = 0
            await self.commit()


class BulkTransport(faust_aiokafka.Transport):
    """aiokafka transport whose consumer is :class:`BulkConsumer`."""

    Consumer = BulkConsumer


class BulkApp(faust.App):
    """A Faust app whose consumer delivers ``bulk_topics`` as RecordBlock events."""

    def __init__(
        self,
        *args: Any,
        bulk_topics: Iterable[str] = (),
        fetch_wait_ms: int = 1500,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.bulk_topics = frozenset(bulk_topics)
        fetch_runs.install(self.bulk_topics)  # fetched as column runs, not record objects
        self.flush_hooks: list[FlushHook] = []
        self.fetch_wait_ms = int(fetch_wait_ms)
        self.commit_cap: CommitCap | None = None

    def _commit_cap(self, tp: TP) -> int | None:
        return self.commit_cap(tp) if self.commit_cap is not None else None

    def _new_transport(self) -> Any:
        consumer_cls = type(
            "AppBulkConsumer",
            (BulkConsumer,),
            {
                "bulk_topics": self.bulk_topics,
                "flush_hooks": self.flush_hooks,
                "fetch_wait_ms": self.fetch_wait_ms,
                "commit_cap": staticmethod(self._commit_cap),
            },
        )
        transport_cls = type("AppBulkTransport", (BulkTransport,), {"Consumer": consumer_cls})
        return transport_cls(self.conf.broker_consumer, self)

    def _new_web(self) -> Any:
        """Faust's web driver without its production index at ``/``: the worker serves its
        plan page there (processors.runtime.web_pages), and aiohttp refuses two routes for
        one path."""
        from faust.web import drivers as web_drivers

        driver = web_drivers.by_url(self.conf.web)
        web_cls = type("StreamonWeb", (driver,), {"production_blueprints": []})
        return web_cls(self)


class StoppableWorker(faust.Worker):
    """A Faust worker that exits at once when stopped (SIGTERM, SIGINT) before its first
    partition assignment. Faust's stop, sent while the consumer thread is still in its first
    group join, crashed the process with SIGSEGV in about one stop of five (the thread's loop,
    when the assignment arrived after the stop began; docs/reliability.md). Before the first
    assignment nothing has been read, so there is nothing to commit or save: ``on_early_exit``
    tidies up (flushes the producer, removes the worker's file) and the process exits with
    status 0, as from a graceful stop."""

    def __init__(self, app: faust.App, *, on_early_exit: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.assigned = False
        self._on_early_exit = on_early_exit

        async def first_assignment(sender: Any, assigned: Any, **_: Any) -> None:
            self.assigned = True

        self._receiver = first_assignment  # signals hold their receivers weakly
        app.on_partitions_assigned.connect(first_assignment)

    def _on_sigterm(self) -> None:
        self._stop_early("SIGTERM")
        super()._on_sigterm()

    def _on_sigint(self) -> None:
        self._stop_early("SIGINT")
        super()._on_sigint()

    def _stop_early(self, signal_name: str) -> None:
        if self.assigned:
            return
        logging.getLogger(__name__).info(
            "%s before the first partition assignment: nothing read, exiting now", signal_name
        )
        try:
            self._on_early_exit()
        finally:
            logging.shutdown()
            os._exit(0)
