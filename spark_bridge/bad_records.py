"""Counting the records a read skipped (onBadRecord=skip), back on the driver.

Executors add one entry per input partition they read, keyed by the offset range, to a Spark
accumulator; a range read again (a second action on the same DataFrame, a retried task) replaces
its entry instead of adding to it, so counts are per range read, not per execution.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.accumulators import Accumulator, AccumulatorParam

MAX_SAMPLES = 20

#: (topic, partition, first requested offset or -1 for the log start, end offset)
RangeKey = tuple[str, int, int, int]
#: (records skipped, up to MAX_SAMPLES (offset, reason) pairs)
RangeEntry = tuple[int, tuple[tuple[int, str], ...]]


class _RangeLogParam(AccumulatorParam):
    """Accumulates {range: entry} dicts; the latest entry of a range wins."""

    def zero(self, value: dict) -> dict:
        return {}

    def addInPlace(self, value1: dict, value2: dict) -> dict:  # noqa: N802 (Spark's name)
        value1.update(value2)
        return value1


def new_accumulator(spark: Any) -> Accumulator:
    return spark.sparkContext.accumulator({}, _RangeLogParam())


@dataclass(frozen=True)
class SkippedRange:
    topic: str
    partition: int
    start: int | None
    end: int
    count: int
    samples: tuple[tuple[int, str], ...]


@dataclass(frozen=True)
class SkippedRecords:
    """What reads with onBadRecord=skip left out, so far in this session."""

    ranges: tuple[SkippedRange, ...]

    @property
    def total(self) -> int:
        return sum(r.count for r in self.ranges)

    def __str__(self) -> str:
        if not self.ranges:
            return "no records skipped"
        lines = [f"{self.total} records skipped (onBadRecord=skip):"]
        for r in self.ranges:
            start = "log start" if r.start is None else r.start
            first = f"; first at offset {r.samples[0][0]}: {r.samples[0][1]}" if r.samples else ""
            lines.append(f"  {r.topic}[{r.partition}] {start}..{r.end}: {r.count}{first}")
        return "\n".join(lines)


def summarize(log: dict[RangeKey, RangeEntry], topic: str | None = None) -> SkippedRecords:
    ranges = [
        SkippedRange(t, p, None if s < 0 else s, e, count, samples)
        for (t, p, s, e), (count, samples) in sorted(log.items())
        if topic is None or t == topic
    ]
    return SkippedRecords(tuple(ranges))
