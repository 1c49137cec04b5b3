"""Apache Flink (PyFlink Table API, local mini-cluster) on the bench's CSV files.

The spec (JSON) names the tables (CSV files, columns, whether ``ts`` becomes an event-time
attribute ``rt`` with a watermark), the measured query (an aggregate: count and checksum of the
result rows, so that only one row comes back), an optional scan query (the same aggregate
without the WHERE: what reading the CSV alone costs) and the runtime mode. A tiny job runs
first so that the mini-cluster's start is start-up, not processing time.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from peer_common import emit, now


def _table_ddl(t: dict) -> str:
    cols = [f"{n} {ty}" for n, ty in t["columns"]]
    if t.get("rowtime"):
        cols += ["rt AS TO_TIMESTAMP_LTZ(ts, 3)", "WATERMARK FOR rt AS rt"]
    return (
        f"CREATE TEMPORARY TABLE {t['name']} ({', '.join(cols)}) WITH ("
        f"'connector' = 'filesystem', 'path' = '{t['path']}', 'format' = 'csv')"
    )


def _last_row(env, sql: str) -> list:
    """The aggregate's final values (a streaming aggregate sends updates: the last one)."""
    row = None
    with env.sql_query(sql).execute().collect() as rows:
        for r in rows:
            row = list(r)
    return row or []


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    from pyflink.table import EnvironmentSettings, TableEnvironment

    streaming = spec.get("mode", "streaming") == "streaming"
    settings = (EnvironmentSettings.in_streaming_mode() if streaming
                else EnvironmentSettings.in_batch_mode())  # fmt: skip
    env = TableEnvironment.create(settings)
    conf = env.get_config()
    conf.set("parallelism.default", str(spec.get("parallelism", 1)))
    if streaming:  # one update of the aggregate per mini-batch, not per input row
        conf.set("table.exec.mini-batch.enabled", "true")
        conf.set("table.exec.mini-batch.allow-latency", "1 s")
        conf.set("table.exec.mini-batch.size", "50000")
    for t in spec["tables"]:
        env.execute_sql(_table_ddl(t))
    _last_row(env, "SELECT COUNT(*) FROM (VALUES (1), (2)) AS w(x)")  # starts the mini-cluster
    plan = env.explain_sql(spec["query"])
    ready = now()
    row = _last_row(env, spec["query"])
    t1 = now()
    result = {"records": spec["records"], "t_ready": ready, "t0": ready, "t1": t1,
              "count": int(row[0] or 0), "checksum": int(row[1] or 0), "extra": row[2:],
              "interval_joins": plan.count("IntervalJoin("), "joins": plan.count("Join("),
              "mode": spec.get("mode", "streaming")}  # fmt: skip
    if spec.get("scan_query"):
        s0 = now()
        _last_row(env, spec["scan_query"])
        result["scan_rate"] = spec["records"] / max(now() - s0, 1e-6)
    emit(result)


if __name__ == "__main__":
    main()
