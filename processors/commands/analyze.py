"""``streamon analyze``: Spark analytics of a query's result topic and of the stats topic.

Reads the result topic with the ``streamon`` data source (:mod:`spark_bridge`), prints its
net relation, per-key aggregates over a time range, the sinks' output latency distribution and
the timeline of plan changes, and with ``out`` writes them as Parquet and CSV with PNG plots.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topics.admin import TopicError

Say = Callable[[str], None]


def _say(text: str) -> None:
    print(f"[analyze] {text}", flush=True)


@dataclass
class AnalyzeSpec:
    """What to analyze: a query (its result topic, schema and keys), or a topic by hand."""

    query: str | None = None  # a query file, module:attr or built-in name
    topic: str | None = None  # the result topic (default: the query's)
    schema: str | None = None  # reader schema: name, path or JSON (default: the query's)
    query_name: str | None = None  # whose Stats records to analyze (default: the query's)
    keys: list[str] | None = None  # default: the query's GROUP BY columns, else its key field
    values: list[str] | None = None  # default: every numeric non-key column
    since: str | None = None
    until: str | None = None
    time_field: str = "_timestamp"
    bucket: str | None = None
    stats_topic: str = "streamon.stats"
    on_bad_record: str = "fail"
    limit: int = 20
    out: Path | None = None


@dataclass
class Analysis:
    """The tables (pandas) an analysis produced, and the counts behind its headlines."""

    topic: str
    records: int = 0
    inserts: int = 0
    deletes: int = 0
    keys: list[str] = field(default_factory=list)
    net: Any = None  # pandas: the net relation with _count (the first `limit` rows)
    net_rows: int = 0  # distinct rows with a non-zero count
    net_total: int = 0  # rows, counting multiplicities
    aggregates: Any = None
    latency: Any = None
    latency_series: Any = None
    changes: Any = None
    skipped: str = ""
    written: list[Path] = field(default_factory=list)


def resolve(spec: AnalyzeSpec) -> tuple[str, str | None, str | None, list[str]]:
    """(result topic, schema JSON or name, query name, default keys) from the spec."""
    topic, schema, name, keys = spec.topic, spec.schema, spec.query_name, spec.keys
    if spec.query:
        from processors.commands.queries import load_plan

        plan = load_plan(spec.query)
        topic = topic or plan.result_topic
        schema = schema or json.dumps(plan.output_schema)
        name = name or plan.name
        if keys is None:
            keys = default_keys(plan)
    if not topic:
        raise ValueError("analyze needs a query or --topic")
    return topic, schema, name, keys or []


def check_spec(spec: AnalyzeSpec) -> None:
    """Argument errors, raised before Spark starts (20 s and more): a ValueError naming them."""
    if not spec.query and not spec.topic:
        raise ValueError(
            "analyze needs a QUERY (a .py file, module:attr or built-in name) or --topic TOPIC "
            "(with --schema NAME unless its writer schemas are on the schema path); "
            "see `streamon analyze --help`"
        )
    if spec.limit <= 0:
        raise ValueError(f"--limit must be a positive number of rows, got {spec.limit}")
    resolve(spec)  # loads the query: an unknown query or a bad query file fails here
    if spec.since is not None or spec.until is not None:
        from spark_bridge.analytics import to_ms

        for option, value in (("--since", spec.since), ("--until", spec.until)):
            try:
                to_ms(value)
            except ValueError as exc:
                raise ValueError(f"{option}: {exc}") from exc


def default_keys(plan: Any) -> list[str]:
    """GROUP BY columns of the result, else the (single) stream's key field if output."""
    names = [c.name for c in plan.output]
    grouped = [c.name for c in plan.output if c.source in plan.group_by]
    if grouped:
        return grouped
    keys = [s.key for s in plan.streams if s.key]
    return [keys[0]] if len(plan.streams) == 1 and keys and keys[0] in names else []


def _records_summary(df: Any) -> tuple[int, int, int]:
    from pyspark.sql import functions as F

    row = df.agg(
        F.count(F.lit(1)).alias("n"),
        F.count(F.when(F.col("_sign") > 0, 1)).alias("ins"),
        F.count(F.when(F.col("_sign") < 0, 1)).alias("dels"),
    ).collect()[0]
    return int(row["n"]), int(row["ins"]), int(row["dels"])


def _stats_frame(spark: Any, spec: AnalyzeSpec, bootstrap: str, say: Say) -> Any:
    import spark_bridge as sb

    try:
        return sb.read_topic(
            spark, spec.stats_topic, bootstrap, schema="stats", on_bad_record="skip"
        )
    except TopicError as exc:
        say(f"no statistics: {exc}")
        return None


def analyze(spark: Any, spec: AnalyzeSpec, bootstrap: str, registry: str | None = None,
            say: Say = _say) -> Analysis:  # fmt: skip
    """Run the analyses, print their tables, and write them when ``spec.out`` is set."""
    import spark_bridge as sb

    topic, schema, name, keys = resolve(spec)
    df = sb.read_topic(
        spark, topic, bootstrap, schema=schema, registry=registry,
        on_bad_record=spec.on_bad_record,
    ).cache()  # fmt: skip
    result = Analysis(topic=topic, keys=keys)
    result.records, result.inserts, result.deletes = _records_summary(df)
    say(f"result topic {topic}: {result.records} records "
        f"({result.inserts} inserts, {result.deletes} deletes)")  # fmt: skip
    net = sb.net_relation(df).cache()
    from pyspark.sql import functions as F

    totals = net.agg(F.count(F.lit(1)), F.sum("_count")).collect()[0]
    result.net_rows, result.net_total = int(totals[0]), int(totals[1] or 0)
    cols = sb.record_columns(df)
    result.net = net.orderBy(*(keys or cols)).limit(spec.limit).toPandas()
    first = f"; the first {spec.limit}:" if result.net_rows else ""
    say(f"net relation (inserts minus deletes): {result.net_rows} distinct rows, "
        f"{result.net_total} in all{first}")  # fmt: skip
    if result.net_rows:
        print(result.net.to_string(index=False), flush=True)
    aggregates = sb.key_aggregates(
        df, keys, spec.values, spec.since, spec.until, spec.time_field, spec.bucket
    )
    result.aggregates = aggregates.toPandas()
    span = f"[{spec.since or 'start'}, {spec.until or 'end'}) of {spec.time_field}"
    say(f"per-key aggregates by {keys or '(no key: all records)'} over {span}:")
    print(result.aggregates.head(spec.limit).to_string(index=False), flush=True)
    stats = _stats_frame(spark, spec, bootstrap, say)
    if stats is not None:
        stats = stats.cache()
        result.latency = sb.latency_distribution(stats, name).toPandas()
        result.latency_series = sb.latency_series(stats, name).toPandas()
        say(f"output latency of {name or 'every query'} (sink Stats windows, ms):")
        print(result.latency.to_string(index=False) if len(result.latency) else "(none)")
        result.changes = sb.plan_changes(stats, name).toPandas()
        result.changes["partition"] = result.changes["partition"].astype("Int64")
        kinds = result.changes["kind"].value_counts().to_dict() if len(result.changes) else {}
        say(f"plan changes of {name or 'every query'}: {len(result.changes)} {kinds or ''}")
        if len(result.changes):
            shown = result.changes[["time", "agent", "partition", "kind", "subject", "from",
                                    "to", "reason"]].head(spec.limit).copy()  # fmt: skip
            for col in ("from", "to", "reason"):
                shown[col] = shown[col].map(_clip)
            print(shown.to_string(index=False), flush=True)
    result.skipped = str(sb.skipped_records(spark, topic))
    if spec.on_bad_record == "skip":
        say(result.skipped)
    if spec.out is not None:
        result.written = write(result, net, spec.out, name or topic)
        say(f"wrote {len(result.written)} files to {spec.out}")
    df.unpersist()
    net.unpersist()
    return result


def _clip(value: Any, width: int = 48) -> Any:
    text = "" if value is None else str(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def write(result: Analysis, net: Any, out: Path, title: str) -> list[Path]:
    """Parquet and CSV of every table, and the plots."""
    from spark_bridge import plots

    out.mkdir(parents=True, exist_ok=True)
    written = [out / "net_relation"]
    net.write.mode("overwrite").parquet(str(written[0]))
    tables = {"key_aggregates": result.aggregates, "latency": result.latency,
              "latency_series": result.latency_series, "plan_changes": result.changes}  # fmt: skip
    for stem, table in tables.items():
        if table is None:
            continue
        table.to_parquet(out / f"{stem}.parquet", index=False)
        table.to_csv(out / f"{stem}.csv", index=False)
        written += [out / f"{stem}.parquet", out / f"{stem}.csv"]
    if result.latency_series is not None:
        written.append(plots.plot_latency(result.latency_series, out / "latency.png",
                                          f"output latency: {title}"))  # fmt: skip
    if result.changes is not None:
        written.append(plots.plot_plan_changes(result.changes, out / "plan_changes.png",
                                               f"plan changes: {title}"))  # fmt: skip
    column = "count"
    written.append(plots.plot_key_aggregates(result.aggregates, result.keys, column,
                                             out / "key_aggregates.png",
                                             f"{result.topic}: net {column} per key"))  # fmt: skip
    return written


def run_analyze(spec: AnalyzeSpec, master: str = "local[2]") -> int:
    """The command: settings from the environment, a local Spark session, the analysis."""
    from pyspark.errors.exceptions.captured import CapturedException

    from processors.runtime.config import load_settings, resolve_bootstrap
    from spark_bridge import SparkUnavailable, spark_session

    check_spec(spec)
    settings = load_settings()
    bootstrap = resolve_bootstrap(settings)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    print(f"[analyze] starting Spark ({master}; about 20 s the first time)…", file=sys.stderr,
          flush=True)  # fmt: skip
    try:
        spark = spark_session(master=master, app_name="streamon-analyze")
    except SparkUnavailable as exc:
        print(f"streamon: {exc}", file=sys.stderr)
        return 2
    print(f"[analyze] Spark is up; reading {spec.topic or 'the result topic'} from {bootstrap}",
          file=sys.stderr, flush=True)  # fmt: skip
    try:
        analyze(spark, spec, bootstrap, settings.schema_registry_url)
    except CapturedException as exc:  # a failed Spark job: its Python error's last line says why
        print(f"streamon: Spark job failed: {spark_error_line(exc)}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    return 0


def spark_error_line(exc: BaseException) -> str:
    """The line of a Spark job's error that names the problem (not the Java stack)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    named = [line for line in lines if re.match(r"^[\w.]+(Error|Exception): ", line)]
    return (named or lines or [type(exc).__name__])[-1]


def demo_analysis(
    bootstrap: str, query_file: Path, totals: tuple[int, int], out: Path, say: Say
) -> bool | None:
    """The demo's closing Spark analysis; checks the net relation's totals against ``totals``.

    None when Spark cannot start here (said in one line): the demo's own checks still stand.
    """
    from pyspark.errors.exceptions.captured import CapturedException

    from spark_bridge import SparkUnavailable, spark_session

    logging.getLogger("py4j").setLevel(logging.WARNING)
    say("Spark analysis of the results (local[2], the streamon data source):")
    try:
        spark = spark_session(master="local[2]", app_name="streamon-demo")
    except SparkUnavailable as exc:
        say(f"Spark analysis skipped: {exc}")
        return None
    try:
        spec = AnalyzeSpec(query=str(query_file), keys=[], limit=10, out=out)
        result = analyze(spark, spec, bootstrap, say=say)
    except CapturedException as exc:
        say(f"Spark analysis failed: {spark_error_line(exc)}")
        return False
    except Exception as exc:  # a bug here must not hide the demo's own result
        say(f"Spark analysis failed: {type(exc).__name__}: {exc}")
        return False
    finally:
        spark.stop()
    row = result.aggregates.iloc[0] if len(result.aggregates) else None
    got = None if row is None else (int(row["sum_total_bytes"]), int(row["sum_packets"]))
    say(f"Spark net totals: total_bytes={got and got[0]}, packets={got and got[1]} "
        f"({'equal to' if got == totals else 'DIFFERENT from'} the replay)")  # fmt: skip
    return got == totals
