"""A worker's numba kernels compiled before it takes input (issue 16: bounded memory, timely
output).

numba compiles a kernel the first time it runs with given argument types and caches the
machine code on disk (``NUMBA_CACHE_DIR``, else beside the sources). A worker started with the
cache empty (a deployment's first start, a new container) otherwise compiles in the middle of
its first records: seconds in which its event loop does nothing else, and ~150 MB of resident
memory at the peak, counted against the query's memory limit (a clean clone's CI run failed
``tests/integration/test_memory_state.py`` on it). :func:`warm_kernels` runs the worker's own
query once in process over synthetic records before the worker joins its group, along the
worker's own path (records in a fetched block, ingest's decode, every partition of every step
as ingest routes them, in envelopes: :class:`~processors.physical.fleet.FleetRunner`; a
commit's snapshot save), so that both happen at start-up. With the cache warm it costs a
fraction of a second.

The records are made to reach the kernels without making much work: integer fields and the
event time count up (every key occurs once per stream, so an equijoin makes one result per
tuple), strings are those numbers, floats spread over 0-100 (a filter passes some). Blocks
grow from small, and the run stops after :data:`WARM_BUDGET_S` of work besides compiling, so
a query whose joins multiply synthetic records anyway (a join on a boolean) or whose
operators are slow costs start-up little. Nothing it does reaches a topic; an error is logged
and the worker starts as before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

import numpy as np
from numba.core import event as numba_events

from processors.core.batch import Batch, Column, VarColumn, null_column
from processors.core.plan import LogicalPlan
from processors.physical.fleet import FleetRunner
from processors.runtime.ingest import decode_block, input_codec
from processors.runtime.record_block import Packed, RecordBlock
from processors.runtime.state import StateSnapshots
from topics.avro_layout import FlatField
from topics.columnar import RecordCodec
from topics.columnar_values import DTYPES, zeros

log = logging.getLogger(__name__)

#: synthetic records per input stream (A-Greedy's profiling and the indexes' growth are
#: reached well within it)
WARM_ROWS = 20_000
#: the first block's records per stream; each next block doubles, up to :data:`WARM_BLOCK_MAX`
WARM_BLOCK_MIN = 128
WARM_BLOCK_MAX = 4_096
#: no block starts after this many seconds of running the stages (compilation not counted:
#: it is what the warm-up is for), so that costly operators (the Chain experiments' synthetic
#: ones spin for a set time a tuple) do not hold a worker's start long
WARM_BUDGET_S = 2.0


def synthetic_column(f: FlatField, start: int, n: int, rng: np.random.Generator) -> Column:
    """``n`` values of ``f``: counting up from ``start`` where the type allows, else zero."""
    counting = start + np.arange(n, dtype=np.int64)
    if f.type in ("int", "long"):
        return counting.astype(DTYPES[f.type])
    if f.type in ("float", "double"):
        return rng.uniform(0.0, 100.0, n).astype(DTYPES[f.type])
    if f.type == "enum" and f.symbols:
        return (counting % len(f.symbols)).astype(DTYPES["enum"])
    if f.type in ("string", "bytes"):
        return VarColumn.from_values([str(v) for v in counting.tolist()], f.type == "string")
    return zeros(f, n)  # booleans, fixed, collections


def synthetic_batch(fields: tuple[FlatField, ...], start: int, n: int,
                    rng: np.random.Generator) -> Batch:  # fmt: skip
    """``n`` inserts of a stream's schema, event times ``start`` .. ``start + n - 1`` ms."""
    columns: dict[str, Column] = {}
    for f in fields:
        columns[f.name] = synthetic_column(f, start, n, rng)
        if f.nullable:
            columns[null_column(f.name)] = np.zeros(n, np.bool_)
    return Batch.inserts(columns, ts=start + np.arange(n, dtype=np.int64))


def _blocks(rows: int) -> Iterator[tuple[int, int]]:
    """(start, size) of growing blocks that cover ``rows``."""
    start, size = 0, WARM_BLOCK_MIN
    while start < rows:
        size = min(size, rows - start)
        yield start, size
        start, size = start + size, min(size * 2, WARM_BLOCK_MAX)


def fetched_block(topic: str, partition: int, codec: RecordCodec, batch: Batch) -> RecordBlock:
    """``batch`` encoded as ``topic``'s records, in a block over one buffer as a fetch makes
    it (no keys; offsets and Kafka timestamps counting up from its first event time)."""
    buf, offsets = codec.encode_many(batch.columns, len(batch))
    n = len(batch)
    no_keys = np.full(n, -1, np.int64)
    data = np.frombuffer(buf.tobytes(), np.uint8)  # read-only, as over a fetch response
    packed = Packed(data, np.zeros(n, np.int64), no_keys, offsets[:-1].copy(), np.diff(offsets))
    counting = int(batch.ts[0]) + np.arange(n, dtype=np.int64)
    return RecordBlock.packed(topic, partition, counting, counting, packed)


class _Discard:
    """A producer that writes nothing: the warm-up's snapshots go nowhere."""

    def produce(self, topic: str, value: bytes | None, key: bytes | None = None) -> None:
        pass


def _run(plan: LogicalPlan, rows: int, spent: Callable[[], float]) -> int:
    """Feed ``rows`` synthetic records of every stream through the worker's own path (a fetched
    block, ingest's decode, the plan's steps on every partition as ingest routes them), then
    save every stateful partition's snapshot as a commit does; returns the records a stream
    fed before :data:`WARM_BUDGET_S` of ``spent`` work ran out."""
    fleet = FleetRunner(plan, envelopes=True)
    codecs = {s.name: input_codec(plan, s) for s in plan.streams}
    rng = np.random.default_rng(0)
    for i, (start, size) in enumerate(_blocks(rows)):
        if spent() > WARM_BUDGET_S:
            rows = start
            break
        for stream in plan.streams:
            codec, partition = codecs[stream.name], i % (stream.partitions or 1)
            rows_of = synthetic_batch(codec.encoder.fields, start, size, rng)  # whole records
            block = fetched_block(stream.topic, partition, codec, rows_of)
            for batch in decode_block(block, block.packed_values(), codec, stream.timestamp)[0]:
                fleet.push(stream.name, partition, batch)
    fleet.flush()
    snapshots = StateSnapshots("", "warm-up", _Discard())  # type: ignore[arg-type]
    stateful = {step.name for step in fleet.physical.stateful}
    for (step, partition), chain in fleet.chains.items():
        if step in stateful:
            snapshots.save(step, partition, {}, chain.snapshot_parts())
    return rows


def warm_kernels(plan: LogicalPlan, rows: int = WARM_ROWS) -> float:
    """Run ``plan`` in process over ``rows`` synthetic records per stream; returns the seconds
    it took. Never raises: a failure is logged and the worker starts without it."""
    began, fed = time.perf_counter(), rows
    compiling = numba_events.TimingListener()  # numba's event API: nested compiles once

    def compiled_s() -> float:
        return compiling.duration if compiling.done else 0.0

    logging.disable(logging.INFO)  # the throwaway stages' plan changes are not the worker's
    try:
        with numba_events.install_listener("numba:compile", compiling):
            fed = _run(plan, rows, lambda: time.perf_counter() - began - compiled_s())
    except Exception as exc:  # a warm-up must never keep a worker from starting
        log.warning("kernel warm-up skipped (%s: %s); kernels compile on first use",
                    type(exc).__name__, exc)  # fmt: skip
    finally:
        logging.disable(logging.NOTSET)
    took = time.perf_counter() - began
    if fed < rows:
        log.info("kernel warm-up stopped at %d records a stream (its budget)", fed)
    log.info("kernels warmed in %.2f s (%.2f s of it compiling)", took, compiled_s())
    return took
