"""Batch analytics a streamon user runs on result topics and on the stats topic.

* :func:`key_aggregates`: per key (and optional time bucket), how the result relation changed
  over a time range: signed counts and sums, so deletes cancel the inserts they retract.
* :func:`latency_distribution` / :func:`latency_series`: output latency as the sinks report it
  in ``streamon.Stats`` records (per one-second window: mean and max over output batches).
* :func:`plan_changes`: the timeline of plan changes the agents report in their Stats
  ``events``: filter orders (A-Greedy), join orders (MJoin), scheduling priorities (Chain).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, FloatType, IntegerType, LongType, TimestampType

from spark_bridge.relation import record_columns

STATS_TOPIC = "streamon.stats"  # processors.runtime.worker.STATS_TOPIC
SINK_AGENT = "sink"  # processors.runtime.worker.SINK_AGENT: the agent that writes results
_NUMERIC = (IntegerType, LongType, FloatType, DoubleType)

TimeBound = int | float | str | dt.datetime | None


def to_ms(value: TimeBound) -> int | None:
    """A time bound as ms since the epoch: ints are ms, strings ISO 8601 (UTC unless zoned)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(f"not a time: {value!r}")
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            return int(text)
        try:
            value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError as exc:
            raise ValueError(f"not a time: {text!r} (ms since the epoch, or ISO 8601)") from exc
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return int(value.timestamp() * 1000)


def _time_column(df: Any, name: str) -> tuple[Column, bool]:
    """The column and whether it is a Spark timestamp (else ms since the epoch)."""
    field = df.schema[name]
    if isinstance(field.dataType, TimestampType):
        return F.col(name), True
    if isinstance(field.dataType, IntegerType | LongType):
        return F.col(name), False
    raise ValueError(f"time column {name!r} is {field.dataType.simpleString()}, not a "
                     "timestamp or ms since the epoch")  # fmt: skip


def in_time_range(df: Any, since: TimeBound, until: TimeBound, time_column: str) -> Any:
    """Rows with ``since <= time < until`` (either bound may be None)."""
    col, is_ts = _time_column(df, time_column)
    lo, hi = to_ms(since), to_ms(until)
    if is_ts:
        col = F.unix_millis(col)
    if lo is not None:
        df = df.where(col >= F.lit(lo))
    if hi is not None:
        df = df.where(col < F.lit(hi))
    return df


def numeric_columns(df: Any, exclude: list[str] = ()) -> list[str]:  # type: ignore[assignment]
    return [
        c for c in record_columns(df)
        if c not in exclude and isinstance(df.schema[c].dataType, _NUMERIC)
    ]  # fmt: skip


def key_aggregates(
    df: Any,
    keys: list[str],
    values: list[str] | None = None,
    since: TimeBound = None,
    until: TimeBound = None,
    time_column: str = "_timestamp",
    bucket: str | None = None,
) -> Any:
    """Per key: inserts, deletes, net count and, per value column, net sum and average.

    Over the records whose ``time_column`` (the Kafka timestamp by default, or a record field in
    ms) lies in [since, until); ``bucket`` (a Spark interval such as ``"1 minute"``) splits the
    range into windows. Net figures are signed: a delete cancels the insert it retracts, so for
    a GROUP BY result the net sum per key is its latest value.
    """
    unknown = [c for c in [*keys, *(values or [])] if c not in df.columns]
    if unknown:
        raise ValueError(f"no columns {unknown} in {record_columns(df)}")
    values = values if values is not None else numeric_columns(df, exclude=keys)
    rows = in_time_range(df, since, until, time_column)
    group: list[Column] = [F.col(k) for k in keys]
    if bucket:
        col, is_ts = _time_column(df, time_column)
        ts = col if is_ts else F.timestamp_millis(col)
        group.insert(0, F.window(ts, bucket).start.alias("bucket_start"))
    sign = F.col("_sign").cast("long")
    count = F.sum(sign)
    aggs = [
        F.count(F.when(sign > 0, 1)).alias("inserts"),
        F.count(F.when(sign < 0, 1)).alias("deletes"),
        count.alias("count"),
    ]
    for v in values:
        total = F.sum(sign * F.col(v))
        aggs.append(total.alias(f"sum_{v}"))
        aggs.append(F.when(count != 0, total / count).alias(f"avg_{v}"))
    out = rows.groupBy(*group).agg(*aggs)
    order = [*(["bucket_start"] if bucket else []), *keys]
    return out.orderBy(*order) if order else out


def _stats_of(stats: Any, query: str | None) -> Any:
    return stats.where(F.col("query") == query) if query else stats


def latency_series(stats: Any, query: str | None = None) -> Any:
    """The sinks' Stats windows that output something: time, worker, batches, mean and max."""
    sinks = _stats_of(stats, query).where((F.col("agent") == SINK_AGENT) & (F.col("batches") > 0))
    return sinks.select(
        F.timestamp_millis("window_end_ms").alias("time"), "query", "worker_id", "batches",
        "tuples_out", "latency_ms_avg", "latency_ms_max",
    ).orderBy("time", "worker_id")  # fmt: skip


def latency_distribution(stats: Any, query: str | None = None) -> Any:
    """Per query: output batches, their mean latency, quantiles of the per-window means, max.

    The sinks report, per one-second window, the mean and the max latency of their output
    batches (arrival of the oldest input tuple to output); the mean here weights windows by
    their batches, the quantiles are over windows (exact, ``percentile``), ``max_ms`` is the
    largest latency of any batch.
    """
    series = latency_series(stats, query)
    avg = F.col("latency_ms_avg")
    return (
        series.groupBy("query")
        .agg(
            F.count(F.lit(1)).alias("windows"),
            F.sum("batches").alias("batches"),
            F.sum("tuples_out").alias("tuples_out"),
            (F.sum(avg * F.col("batches")) / F.sum("batches")).alias("mean_ms"),
            F.percentile(avg, 0.5).alias("p50_ms"),
            F.percentile(avg, 0.9).alias("p90_ms"),
            F.percentile(avg, 0.99).alias("p99_ms"),
            F.max("latency_ms_max").alias("max_ms"),
        )
        .orderBy("query")
    )


def _kind(e: Column) -> Column:
    return (
        F.when(e["kind"].isNotNull(), e["kind"])
        .when(e["pipeline"].isNotNull(), F.lit("join_order"))
        .when(e["at_tuple"].isNotNull(), F.lit("filter_order"))
        .when(e["unreported"].isNotNull(), F.lit("unreported"))
        .otherwise(F.lit("other"))
    )


def plan_changes(stats: Any, query: str | None = None) -> Any:
    """Every plan change in the Stats ``events``, one row each, in time order.

    Columns: time (of the change, else of the report), reported (window end), query, worker,
    agent, partition, kind (``filter_order``, ``join_order``, ``priorities``, ``unreported``:
    changes the stage no longer remembered), subject (the join pipeline, or the agent),
    position in the stream (tuples or deltas seen), from, to, reason, and the event as JSON.
    """
    rows = _stats_of(stats, query).where(F.col("events") != "[]")
    # each event as its own JSON text first (kept as is), then as a map of its fields
    raw = F.explode(F.from_json("events", "array<string>")).alias("event_json")
    exploded = rows.select("*", raw).withColumn(
        "e", F.from_json("event_json", "map<string,string>")
    )
    e = F.col("e")
    reported = F.timestamp_millis("window_end_ms")
    return exploded.select(
        F.coalesce(F.timestamp_millis(e["time_ms"].cast("long")), reported).alias("time"),
        reported.alias("reported"),
        "query",
        F.col("worker_id").alias("worker"),
        "agent",
        e["partition"].cast("int").alias("partition"),
        _kind(e).alias("kind"),
        F.coalesce(e["pipeline"], F.col("agent")).alias("subject"),
        F.coalesce(e["at_tuple"], e["at_delta"]).cast("long").alias("at"),
        e["from"].alias("from"),
        e["to"].alias("to"),
        e["reason"].alias("reason"),
        F.col("event_json").alias("event"),
    ).orderBy("time", "worker", "agent", "partition")
