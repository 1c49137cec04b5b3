"""``streamon publish``: JSON Lines or CSV from a file or stdin, as Avro records on a topic.

Lines are read in chunks, converted to columns (:mod:`processors.commands.publish_input`),
encoded in bulk by :class:`topics.columnar.RecordCodec` and produced by
:class:`processors.runtime.producer.RecordProducer`, exactly as :func:`publish_batch` does: the
records are what ingest agents read. Framing is single-object encoding, or the Confluent wire
format (subject ``<topic>-value``) when a schema registry URL is configured.

Exit status: 0 when every line was published, 1 when some lines were skipped (or, with
``stop_on_error``, publishing stopped at the first bad line), 2 for a usage, schema or broker
error (raised to the command line).
"""

from __future__ import annotations

import csv
import io
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import IO, TextIO

import numpy as np

from processors.commands.publish_input import Chunk, LineError, RecordParser
from processors.runtime.producer import RecordProducer
from topics.avro import RegistryCodec, schema_name
from topics.columnar import RecordCodec

CHUNK_LINES = 50_000
PROGRESS_EVERY_S = 0.5


@dataclass
class PublishOptions:
    """What to publish where; ``progress=None`` shows progress when stderr is a terminal."""

    topic: str
    schema: dict
    source: str = "-"  # a path, or "-" for stdin
    fmt: str = "json"  # "json" (JSON Lines) or "csv"
    key: str | None = None
    stop_on_error: bool = False
    progress: bool | None = None
    partitions: int = 1  # when the topic has to be created
    chunk_lines: int = CHUNK_LINES
    registry_url: str | None = None


@dataclass
class PublishSummary:
    """Counts for the final line and the exit status."""

    written: int = 0
    skipped: int = 0
    seconds: float = 0.0
    stopped: bool = False  # stopped at a bad line (stop_on_error)
    errors: list[LineError] = field(default_factory=list)  # kept for callers that want them

    @property
    def exit_code(self) -> int:
        return 0 if not self.skipped and not self.stopped else 1


def _json_chunks(fh: IO[bytes], parser: RecordParser, size: int) -> Iterator[Chunk]:
    line = 1
    while True:
        lines = list(islice(fh, size))
        if not lines:
            return
        yield parser.json_chunk(lines, line)
        line += len(lines)


class _LineCountingReader:
    """csv.reader over a text file, giving the line each row starts on."""

    def __init__(self, text: TextIO) -> None:
        self._reader = csv.reader(text)

    def rows(self) -> Iterator[tuple[int, list[str]]]:
        last = 0
        for row in self._reader:
            yield last + 1, row
            last = self._reader.line_num


def _csv_chunks(fh: IO[bytes], parser: RecordParser, size: int) -> Iterator[Chunk]:
    text = io.TextIOWrapper(fh, encoding="utf-8", newline="")
    rows = _LineCountingReader(text).rows()
    first = next(rows, None)
    if first is None:
        return
    index = parser.csv_header(first[1])
    while True:
        batch = list(islice(rows, size))
        if not batch:
            return
        yield parser.csv_chunk([r for _, r in batch], [n for n, _ in batch], index)


class _Progress:
    """records/s on stderr, at most every PROGRESS_EVERY_S; rewritten in place on a terminal."""

    def __init__(self, out: TextIO, enabled: bool) -> None:
        self.out, self.enabled = out, enabled
        self.tty = enabled and out.isatty()
        self.start = self.last = time.monotonic()

    def update(self, summary: PublishSummary, final: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not final and now - self.last < PROGRESS_EVERY_S):
            return
        self.last = now
        rate = summary.written / max(now - self.start, 1e-9)
        text = f"{summary.written:,} records, {rate:,.0f} records/s, {summary.skipped:,} skipped"
        if self.tty:
            end = "\n" if final else ""
            self.out.write(f"\r\x1b[K{text}{end}")
        elif not final:
            self.out.write(text + "\n")
        self.out.flush()


def _cut_at_first_error(chunk: Chunk) -> Chunk:
    """The records of lines before the chunk's first bad line (stop_on_error)."""
    first = chunk.errors[0].line
    keep = np.flatnonzero(chunk.lines < first)
    cols = {name: col.take(keep) for name, col in chunk.columns.items()}  # numpy or VarColumn
    key = chunk.key.take(keep) if chunk.key is not None else None
    errors = [e for e in chunk.errors if e.line == first]
    return Chunk(cols, chunk.lines[keep], errors, key)


def _ensure_topic(bootstrap: str, topic: str, partitions: int, err: TextIO) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from processors.runtime.kafka_security import client_config
    from topics.admin import TopicError, ensure_topics
    from topics.specs import TopicSpec

    # all topics: a metadata request naming the topic may create it (tansu does)
    try:
        meta = AdminClient(client_config({"bootstrap.servers": bootstrap})).list_topics(timeout=10)
    except KafkaException as exc:
        raise TopicError(f"broker at {bootstrap} did not answer a metadata request: {exc}") from exc
    found = meta.topics.get(topic)
    if found is not None and found.error is None and found.partitions:
        return
    ensure_topics(bootstrap, [TopicSpec(topic, partitions)])
    print(f"created topic {topic} with {partitions} partition(s)", file=err)


def run_publish(
    bootstrap: str, opts: PublishOptions, err: TextIO | None = None, stdin: IO[bytes] | None = None
) -> PublishSummary:
    """Publish every good line of ``opts.source``; report each bad one on ``err``."""
    err = sys.stderr if err is None else err
    parser = RecordParser(opts.schema, key=opts.key)
    registry = RegistryCodec(opts.registry_url, subject=f"{opts.topic}-value") if (
        opts.registry_url) else None  # fmt: skip
    codec = RecordCodec(opts.schema, registry=registry)
    label = "<stdin>" if opts.source == "-" else opts.source
    progress = _Progress(err, err.isatty() if opts.progress is None else opts.progress)
    summary = PublishSummary()
    try:
        fh = (stdin or sys.stdin.buffer) if opts.source == "-" else open(opts.source, "rb")  # noqa: SIM115
    except OSError as exc:
        raise ValueError(f"cannot read {opts.source}: {exc.strerror or exc}") from exc
    _ensure_topic(bootstrap, opts.topic, opts.partitions, err)
    chunks = _csv_chunks if opts.fmt == "csv" else _json_chunks
    producer = RecordProducer(bootstrap)
    started = time.monotonic()
    try:
        for chunk in chunks(fh, parser, opts.chunk_lines):
            if chunk.errors and opts.stop_on_error:
                chunk = _cut_at_first_error(chunk)
                summary.stopped = True
            if chunk.errors and progress.tty:
                err.write("\r\x1b[K")  # the progress line gives way to the errors
            for error in chunk.errors:
                print(f"{label}: {error}", file=err)
            summary.errors.extend(chunk.errors)
            summary.skipped += chunk.skipped
            if len(chunk):
                buf, offsets = codec.encode_many(chunk.columns, len(chunk))
                producer.produce_many(opts.topic, buf, offsets, keys=chunk.key)
                summary.written += len(chunk)
            progress.update(summary)
            if summary.stopped:
                break
    finally:
        if fh is not stdin and fh is not sys.stdin.buffer:
            fh.close()
        producer.close()  # waits for every record to be acknowledged
    summary.seconds = time.monotonic() - started
    progress.update(summary, final=True)
    framing = "Confluent wire format" if registry else "single-object"
    rate = summary.written / max(summary.seconds, 1e-9)
    tail = " (stopped at the first bad line)" if summary.stopped else ""
    print(
        f"published {summary.written:,} records to {opts.topic} ({schema_name(opts.schema)}, "
        f"{framing}) in {summary.seconds:.2f} s, {rate:,.0f} records/s; "
        f"skipped {summary.skipped:,} bad lines{tail}",
        file=err,
    )
    return summary
