"""The ``streamon`` Python data source: Kafka topics of Avro records as Spark DataFrames.

``spark.read.format("streamon").option("topic", T).option("bootstrap", B).load()`` plans one
input partition per topic-partition offset range (start: ``startingOffsets`` or the log start;
end: ``endingOffsets`` or the true end offset from fetch high watermarks, fixed when the
DataFrame is loaded), and each task reads its range with confluent-kafka and decodes it in bulk
into Arrow batches (:mod:`spark_bridge.arrow_decode`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from spark_bridge.arrow_decode import BadRecord, BadRecordError, ChunkDecoder
from spark_bridge.bad_records import MAX_SAMPLES, RangeEntry, RangeKey
from spark_bridge.kafka_range import read_range
from spark_bridge.options import OptionError, ReadOptions, parse_options
from spark_bridge.schema import arrow_schema, check_requested, spark_schema
from topics.admin import high_watermarks
from topics.avro import (
    CONFLUENT_HEADER_LEN,
    CONFLUENT_MAGIC,
    SINGLE_OBJECT_HEADER_LEN,
    SINGLE_OBJECT_MARKER,
    RegistryCodec,
    SchemaError,
    SchemaStore,
)

FORMAT = "streamon"
log = logging.getLogger("streamon.spark")


class OffsetRange(InputPartition):
    """Offsets ``start`` (None: the log start) to ``end`` (exclusive) of one topic-partition."""

    def __init__(self, topic: str, partition: int, start: int | None, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end

    def __repr__(self) -> str:
        return f"OffsetRange({self.topic}[{self.partition}] {self.start}..{self.end})"


@dataclass(frozen=True)
class Plan:
    """A load() resolved: options, reader schema, and the ranges every action will read."""

    options: ReadOptions
    reader_schema: dict
    ranges: tuple[OffsetRange, ...]


def plan_ranges(opts: ReadOptions) -> tuple[OffsetRange, ...]:
    """One range per partition read; end offsets from fetch high watermarks (DESIGN.md)."""
    marks = high_watermarks(opts.bootstrap, opts.topic, timeout=opts.timeout_s, extra=opts.consumer)
    parts = opts.partitions if opts.partitions is not None else tuple(sorted(marks))
    for given, name in ((opts.partitions or (), "partitions"), (opts.starting, "startingOffsets"),
                        (opts.ending, "endingOffsets")):  # fmt: skip
        missing = sorted(p for p in given if p not in marks)
        if missing:
            raise OptionError(
                f"option {name}: topic {opts.topic} has no partitions {missing} "
                f"(it has {sorted(marks)})"
            )
    ranges = []
    for p in parts:
        end = opts.ending.get(p, marks[p])
        if end > marks[p]:
            raise OptionError(
                f"option endingOffsets: offset {end} of {opts.topic}[{p}] is past its end "
                f"offset {marks[p]}"
            )
        start = opts.starting.get(p)
        if start is not None and start > marks[p]:
            raise OptionError(
                f"option startingOffsets: offset {start} of {opts.topic}[{p}] is past its end "
                f"offset {marks[p]}"
            )
        ranges.append(OffsetRange(opts.topic, p, start, end))
    return tuple(ranges)


def writer_schema_of(value: bytes, registry: str | None) -> dict:
    """The writer schema a message's header names (schemas/ by fingerprint, or the registry)."""
    if registry:
        if len(value) < CONFLUENT_HEADER_LEN or value[0] != CONFLUENT_MAGIC:
            raise SchemaError(f"first record is not in Confluent wire format: {value[:5]!r}")
        return RegistryCodec(registry).writer_schema(int.from_bytes(value[1:5], "big"))
    if len(value) < SINGLE_OBJECT_HEADER_LEN or value[:2] != SINGLE_OBJECT_MARKER:
        raise SchemaError(f"first record is not single-object encoded: {value[:10]!r}")
    return SchemaStore().by_fingerprint(int.from_bytes(value[2:10], "little"))


def infer_reader_schema(opts: ReadOptions, ranges: tuple[OffsetRange, ...]) -> dict:
    """Without a schema option: the writer schema of the first record in the ranges."""
    for r in ranges:
        for chunk in read_range(
            opts.bootstrap, r.topic, r.partition, r.start, r.end, max_rows=1,
            timeout_s=opts.timeout_s, extra=opts.consumer,
        ):  # fmt: skip
            value = chunk.values[0].as_py()
            try:
                return writer_schema_of(value or b"", opts.registry)
            except SchemaError as exc:
                raise OptionError(
                    f"no schema option for {opts.topic}, and its first record "
                    f"({r.topic}[{r.partition}] offset {int(chunk.offsets[0])}) names no known "
                    f"writer schema ({exc}); pass the reader schema as option schema"
                ) from exc
    raise OptionError(
        f"topic {opts.topic} has no records to take a schema from: pass option schema"
    )


class StreamonDataSource(DataSource):
    """``format("streamon")``; see the module docstring and docs/spark.md for the options."""

    #: the driver's accumulator of skipped ranges, set by :func:`spark_bridge.register` on the
    #: per-session subclass it registers
    skipped_log: Any = None

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _plan(self) -> Plan:
        plan = getattr(self, "_resolved", None)
        if plan is None:
            opts = parse_options(self.options)
            ranges = plan_ranges(opts)
            reader_schema = opts.schema or infer_reader_schema(opts, ranges)
            plan = self._resolved = Plan(opts, reader_schema, ranges)
        return plan

    def schema(self) -> StructType:
        return spark_schema(self._plan().reader_schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        plan = self._plan()
        check_requested(schema, spark_schema(plan.reader_schema))
        return StreamonReader(plan, schema, type(self).skipped_log)


class StreamonReader(DataSourceReader):
    """Plans the offset ranges and reads one per task (on executors)."""

    def __init__(self, plan: Plan, schema: StructType, skipped_log: Any) -> None:
        self.plan = plan
        self.schema = schema
        self.skipped_log = skipped_log

    def partitions(self) -> list[InputPartition]:
        return list(self.plan.ranges)

    def read(self, partition: InputPartition) -> Any:
        assert isinstance(partition, OffsetRange)
        opts = self.plan.options
        decoder = ChunkDecoder(self.plan.reader_schema, opts.registry, arrow_schema(self.schema))
        skipped, samples = 0, []
        for chunk in read_range(
            opts.bootstrap, partition.topic, partition.partition, partition.start, partition.end,
            max_rows=opts.max_batch_rows, timeout_s=opts.timeout_s, extra=opts.consumer,
        ):  # fmt: skip
            batch, bad = decoder.decode(
                chunk.topic, chunk.partition, chunk.values, chunk.keys, chunk.offsets,
                chunk.timestamps_ms, chunk.signs, chunk.errors,
            )  # fmt: skip
            if bad:
                if opts.on_bad_record == "fail":
                    raise BadRecordError(bad)
                skipped += len(bad)
                samples.extend(bad[: MAX_SAMPLES - len(samples)])
            if batch.num_rows:
                yield batch
        if skipped:
            self._report(partition, skipped, samples)

    def _report(self, part: OffsetRange, skipped: int, samples: list[BadRecord]) -> None:
        log.warning("skipped %d records that do not decode in %s; first: %s",
                    skipped, part, samples[0])  # fmt: skip
        if self.skipped_log is not None:
            key: RangeKey = (part.topic, part.partition, -1 if part.start is None else part.start,
                             part.end)  # fmt: skip
            entry: RangeEntry = (skipped, tuple((b.offset, b.reason) for b in samples))
            self.skipped_log.add({key: entry})


def session_source(skipped_log: Any) -> type[StreamonDataSource]:
    """A subclass bound to one session's accumulator (defined here, so pickled by value)."""

    class SessionStreamonDataSource(StreamonDataSource):
        pass

    SessionStreamonDataSource.skipped_log = skipped_log
    return SessionStreamonDataSource


__all__ = ["FORMAT", "OffsetRange", "StreamonDataSource", "session_source"]
