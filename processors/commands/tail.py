"""``streamon tail``: a topic's records as JSON Lines, with the sign of each change.

The consumer is assigned its partitions directly (no group join, which on the embedded broker
takes seconds), so the first record shows as soon as the first fetch answers. Records are
decoded in bulk by :class:`topics.columnar.RecordCodec`; the reader schema defaults to the writer
schema that the first record's single-object fingerprint (or registry id) names.

Which records, like ``tail``:

* ``--from-beginning``: from the start of every partition, in partition order within each; with
  ``--limit N`` only the first N; without ``--follow`` it stops at the end.
* otherwise: the last N records (``--limit N``, default 10, or 0 with ``--follow``), oldest first
  by Kafka timestamp; with ``--follow`` then every new record until interrupted.

End offsets come from what fetches report, not from ListOffsets (see topics/admin.py): a
partition counts as read to its end when the consumer reports reaching it.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any, TextIO

import numpy as np
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from processors.core.batch import VarColumn, null_column
from processors.runtime.producer import SIGN_HEADER
from topics.admin import TopicError
from topics.avro import (
    CONFLUENT_MAGIC,
    SINGLE_OBJECT_HEADER_LEN,
    SINGLE_OBJECT_MARKER,
    FlatField,
    RegistryCodec,
    SchemaError,
    SchemaStore,
    flat_fields,
    schemas_dir,
)
from topics.columnar import RecordCodec

DEFAULT_LAST = 10


@dataclass
class TailOptions:
    """What to print; ``limit=None`` means the defaults described in the module docstring."""

    topic: str
    schema: dict | None = None  # reader schema; None: the first record's writer schema
    from_beginning: bool = False
    follow: bool = False
    limit: int | None = None
    registry_url: str | None = None
    timeout_s: float = 10.0  # metadata and offsets


def _consumer(bootstrap: str) -> Consumer:
    """An assign-only consumer with the process's TLS/SASL settings."""
    from processors.runtime.kafka_security import client_config

    return Consumer(
        client_config(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"streamon-tail-{uuid.uuid4().hex}",  # required, never joined
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 100,  # an idle partition answers (and reports its end) quickly
            }
        )
    )


class _Decoder:
    """Message values -> JSON-ready dicts, in bulk; the codec is built on the first value."""

    def __init__(self, opts: TailOptions, err: TextIO) -> None:
        self.opts, self.err = opts, err
        self.store = SchemaStore()
        self.registry = (
            RegistryCodec(opts.registry_url, subject=f"{opts.topic}-value")
            if opts.registry_url
            else None
        )
        self.codec: RecordCodec | None = None

    def _reader_schema(self, value: bytes) -> dict:
        if self.opts.schema is not None:
            return self.opts.schema
        if value[:2] == SINGLE_OBJECT_MARKER and len(value) >= SINGLE_OBJECT_HEADER_LEN:
            fp = int.from_bytes(value[2:10], "little")
            try:
                return self.store.by_fingerprint(fp)
            except SchemaError as exc:
                raise SchemaError(
                    f"{exc} (first record of {self.opts.topic}); no schema in {schemas_dir()} "
                    "has it: pass --schema NAME|FILE, or set STREAMON_SCHEMAS"
                ) from exc
        if value[:1] == bytes([CONFLUENT_MAGIC]) and self.registry is not None:
            return self.registry.writer_schema(int.from_bytes(value[1:5], "big"))
        raise SchemaError(
            f"the first record of {self.opts.topic} is not single-object encoded "
            f"(starts {value[:2]!r}) and no schema registry is configured: pass --schema"
        )

    def decode(self, msgs: list[Any]) -> list[dict]:
        """Records in message order; undecodable ones are reported on stderr and left out."""
        values = [m.value() for m in msgs]
        for i in [i for i, v in enumerate(values) if v is None]:
            print(f"{_where(msgs[i])}: no value (tombstone), skipped", file=self.err)
        kept = [i for i, v in enumerate(values) if v is not None]
        if not kept:
            return []
        if self.codec is None:
            self.codec = RecordCodec(
                self._reader_schema(values[kept[0]]), store=self.store, registry=self.registry
            )
        lengths = np.fromiter((len(values[i]) for i in kept), np.int64, count=len(kept))
        offsets = np.zeros(len(kept) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        result = self.codec.decode_many(b"".join(values[i] for i in kept), offsets)
        for j, reason in result.errors:
            print(f"{_where(msgs[kept[j]])}: {reason}", file=self.err)
        rows = _rows(self.codec, result.columns, len(result))
        out = []
        for row, j in zip(rows, result.good.tolist(), strict=True):
            msg = msgs[kept[j]]
            row["_sign"] = _sign(msg)
            row["_partition"] = msg.partition()
            row["_offset"] = msg.offset()
            out.append(row)
        return out


def _where(msg: Any) -> str:
    return f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"


def _sign(msg: Any) -> int:
    for key, value in msg.headers() or ():
        if key == SIGN_HEADER:
            return -1 if value == b"-1" else 1
    return 1


def _rows(codec: RecordCodec, columns: dict, n: int) -> list[dict]:
    """Columns -> one dict per record, in the JSON ``publish`` reads back: nulls as null, nested
    records as nested objects, bytes and fixed as Avro JSON (code points 0-255), enums as
    symbols, logical types as their base values."""
    fields = flat_fields(codec.schema)
    lists = []
    for f in fields:
        col = columns[f.name]
        if isinstance(col, VarColumn):
            data, bounds = col.data.tobytes(), col.offsets.tolist()
            enc = "utf-8" if f.type == "string" else "latin-1"
            values = [data[bounds[i] : bounds[i + 1]].decode(enc) for i in range(n)]
        elif f.type == "enum":
            values = [f.symbols[k] for k in col.tolist()]
        else:  # float32 widened exactly, so that the printed value reads back to the same bits
            values = (np.asarray(col).astype(np.float64).tolist() if f.type == "float"
                      else np.asarray(col).tolist())  # fmt: skip
        nulls = columns.get(null_column(f.name))
        if nulls is not None and nulls.any():
            values = [None if null else v for v, null in zip(values, nulls.tolist(), strict=True)]
        lists.append(values)
    names = [f.name for f in fields]
    rows = [dict(zip(names, values, strict=True)) for values in zip(*lists, strict=True)] if (
        lists) else [{} for _ in range(n)]  # fmt: skip
    if any(len(f.path) > 1 for f in fields):
        rows = [_nest(row, fields) for row in rows]
    return rows


def _nest(row: dict, fields: list[FlatField]) -> dict:
    """Dotted leaves -> nested objects, in schema order."""
    out: dict = {}
    for f in fields:
        node = out
        for level in f.path[:-1]:
            node = node.setdefault(level[0], {})
        node[f.path[-1][0]] = row[f.name]
    return out


class _Printer:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.printed = 0

    def write(self, rows: list[dict]) -> None:
        if rows:
            self.out.write("".join(json.dumps(r) + "\n" for r in rows))
            self.out.flush()
            self.printed += len(rows)


def _partitions(consumer: Consumer, topic: str, timeout: float) -> list[int]:
    try:
        # all topics: a metadata request naming the topic may create it (tansu does)
        meta = consumer.list_topics(timeout=timeout).topics.get(topic)
    except KafkaException as exc:
        raise TopicError(f"broker did not answer metadata for topic {topic}: {exc}") from exc
    if meta is None or meta.error is not None or not meta.partitions:
        raise TopicError(f"topic {topic} does not exist")
    return sorted(meta.partitions)


def _poll(consumer: Consumer, topic: str) -> list[tuple[Any, int | None]]:
    """One consume call, in order: (message, None) for a record, (None, partition) for a
    partition that reported reaching its end."""
    events: list[tuple[Any, int | None]] = []
    for msg in consumer.consume(num_messages=10_000, timeout=0.1):
        err = msg.error()
        if err is None:
            events.append((msg, None))
        elif err.code() == KafkaError._PARTITION_EOF:
            events.append((None, msg.partition()))
        else:
            raise TopicError(f"fetch failed for {topic}[{msg.partition()}]: {err.str()}")
    return events


def _messages(events: list[tuple[Any, int | None]]) -> list[Any]:
    return [m for m, _ in events if m is not None]


def _from_beginning(consumer, opts, parts, decoder, printer) -> None:
    consumer.assign([TopicPartition(opts.topic, p, OFFSET_BEGINNING) for p in parts])
    pending = set(parts)
    while opts.follow or pending:
        events = _poll(consumer, opts.topic)
        rows = decoder.decode(_messages(events))
        if opts.limit is not None:
            rows = rows[: opts.limit - printer.printed]
        printer.write(rows)
        if opts.limit is not None and printer.printed >= opts.limit:
            return
        pending.difference_update(p for _, p in events if p is not None)


def _last(consumer, opts, parts, decoder, printer, n: int) -> None:
    starts = []
    for p in parts:  # ListOffsets may undercount the end (tansu): we start early, never late
        low, high = consumer.get_watermark_offsets(
            TopicPartition(opts.topic, p), timeout=opts.timeout_s
        )
        starts.append(TopicPartition(opts.topic, p, max(low, high - n)))
    consumer.assign(starts)
    backlog: dict[int, deque] = {p: deque(maxlen=n) for p in parts}
    fresh: list[Any] = []  # arrived after its partition's end was reached
    pending = set(parts)
    while pending:
        for msg, end in _poll(consumer, opts.topic):
            if msg is None:
                pending.discard(end)
            else:
                (backlog[msg.partition()] if msg.partition() in pending else fresh).append(msg)
    last = sorted((m for q in backlog.values() for m in q),
                  key=lambda m: (m.timestamp()[1], m.partition(), m.offset()))  # fmt: skip
    printer.write(decoder.decode(last[max(len(last) - n, 0) :]))
    printer.write(decoder.decode(fresh))
    while opts.follow:
        printer.write(decoder.decode(_messages(_poll(consumer, opts.topic))))


def run_tail(
    bootstrap: str, opts: TailOptions, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Print the records; returns the exit status (0, also when interrupted). A closed stdout
    (``| head``) raises BrokenPipeError, which the command line turns into a quiet exit."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    if opts.schema is not None:
        flat_fields(opts.schema)  # an unsupported reader schema fails before anything is read
    consumer = _consumer(bootstrap)
    printer = _Printer(out)
    try:
        parts = _partitions(consumer, opts.topic, opts.timeout_s)
        decoder = _Decoder(opts, err)
        if opts.from_beginning:
            _from_beginning(consumer, opts, parts, decoder, printer)
        else:
            n = opts.limit if opts.limit is not None else (0 if opts.follow else DEFAULT_LAST)
            _last(consumer, opts, parts, decoder, printer, n)
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
    return 0
