"""``read_topic``: a topic as a DataFrame, through the official Kafka connector where Spark has
it, else through the ``streamon`` Python data source; the columns are the same either way."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from spark_bridge.connector import kafka_connector_available, read_with_connector
from spark_bridge.options import OptionError, parse_options
from spark_bridge.source import FORMAT, infer_reader_schema, plan_ranges

CONNECTORS = ("auto", "python", "kafka")


def source_options(
    topic: str,
    bootstrap: str,
    *,
    schema: dict | str | None = None,
    registry: str | None = None,
    partitions: list[int] | None = None,
    starting: Mapping[int, int] | None = None,
    ending: Mapping[int, int] | None = None,
    on_bad_record: str = "fail",
) -> dict[str, str]:
    """The ``streamon`` format's options for these arguments."""
    from processors.runtime.kafka_security import spark_options

    # the process's TLS/SASL settings, as kafka.* options: the driver and every executor use them
    options = {"topic": topic, "bootstrap": bootstrap, "onBadRecord": on_bad_record}
    options.update(spark_options())
    if schema is not None:
        options["schema"] = json.dumps(schema) if isinstance(schema, dict) else schema
    if registry:
        options["registry"] = registry
    if partitions is not None:
        options["partitions"] = ",".join(str(p) for p in partitions)
    if starting:
        options["startingOffsets"] = json.dumps({str(p): o for p, o in starting.items()})
    if ending:
        options["endingOffsets"] = json.dumps({str(p): o for p, o in ending.items()})
    return options


def read_topic(
    spark: Any,
    topic: str,
    bootstrap: str,
    *,
    connector: str = "auto",
    **kwargs: Any,
) -> Any:
    """Records of ``topic`` (see :func:`source_options` for the keyword arguments).

    ``connector``: ``python`` (the streamon data source), ``kafka`` (Spark's Kafka source plus
    streamon's decoding) or ``auto`` (kafka when its jar is on Spark's class path).
    """
    if connector not in CONNECTORS:
        raise OptionError(f"connector {connector!r} is not one of {', '.join(CONNECTORS)}")
    options = source_options(topic, bootstrap, **kwargs)
    if connector == "kafka" or (connector == "auto" and kafka_connector_available(spark)):
        opts = parse_options(options)
        ranges = plan_ranges(opts)
        reader_schema = opts.schema or infer_reader_schema(opts, ranges)
        return read_with_connector(spark, opts, reader_schema, ranges)
    return spark.read.format(FORMAT).options(**options).load()
