"""A local Spark session set up for streamon, with the ``streamon`` format registered.

pyspark needs the environment's own python for its workers (``PYSPARK_PYTHON``) and, on machines
without a resolvable host name, ``SPARK_LOCAL_IP``; both default here. The session is small on
purpose (no UI, few shuffle partitions, quiet logs): analytics over result topics are modest
jobs, and start-up time matters more than anything else for them.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from spark_bridge.bad_records import SkippedRecords, new_accumulator, summarize
from spark_bridge.source import session_source

_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
"""


class SparkUnavailable(RuntimeError):
    """Spark cannot start here (no Java, or the JVM failed); the text says which."""


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def _quiet_log_config() -> str:
    path = Path(tempfile.gettempdir()) / "streamon-spark-log4j2.properties"
    if not path.exists() or path.read_text() != _LOG4J:
        path.write_text(_LOG4J)
    return str(path)


def spark_session(
    master: str = "local[2]", app_name: str = "streamon", conf: dict[str, str] | None = None
) -> Any:
    """The active session, or a new local one; either way with ``streamon`` registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if _java() is None:
        raise SparkUnavailable("Spark needs Java 17 or newer, and no java is on PATH or JAVA_HOME")
    from pyspark.sql import SparkSession

    log_opt = f"-Dlog4j2.configurationFile=file:{_quiet_log_config()}"
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.bindAddress": os.environ["SPARK_LOCAL_IP"],
        "spark.driver.host": os.environ["SPARK_LOCAL_IP"],
        "spark.driver.extraJavaOptions": log_opt,
        "spark.executor.extraJavaOptions": log_opt,
        "spark.python.worker.reuse": "true",
        **(conf or {}),
    }
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # pyspark raises PySparkRuntimeError, Py4J errors, OSError, ...
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SparkUnavailable(f"Spark did not start: {first}") from exc
    register(spark)
    return spark


def register(spark: Any) -> None:
    """Register the ``streamon`` format in ``spark`` (once per SparkContext)."""
    sc = spark.sparkContext
    if getattr(sc, "_streamon_skipped", None) is not None:
        return
    log = new_accumulator(spark)
    spark.dataSource.register(session_source(log))
    sc._streamon_skipped = log


def skipped_records(spark: Any, topic: str | None = None) -> SkippedRecords:
    """Records that reads with onBadRecord=skip left out in this session (optionally one topic).

    Known once an action has read them: DataFrames are lazy.
    """
    log = getattr(spark.sparkContext, "_streamon_skipped", None)
    return summarize(dict(log.value) if log is not None else {}, topic)


def clear_skipped_records(spark: Any) -> None:
    log = getattr(spark.sparkContext, "_streamon_skipped", None)
    if log is not None:
        log.value = {}
