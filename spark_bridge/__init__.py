"""Spark reads streamon's result topics for batch analytics.

No Kafka connector jars can be installed here (DESIGN.md, "Spark here"), so the ``streamon``
format is a Python data source (``pyspark.sql.datasource``): one input partition per
topic-partition offset range, read with confluent-kafka on the executors, decoded in bulk with
the topic's Avro schema into typed columns plus ``_topic, _partition, _offset, _timestamp,
_sign, _key``, returned as Arrow batches. Where Spark's own Kafka connector is installed,
:func:`read_topic` uses it with the same decoding. On top: the net relation of a signed result
topic and analytics over results and the stats topic (docs/spark.md).
"""

from spark_bridge.analytics import (
    STATS_TOPIC,
    key_aggregates,
    latency_distribution,
    latency_series,
    plan_changes,
)
from spark_bridge.arrow_decode import BadRecord, BadRecordError
from spark_bridge.options import META_COLUMNS, OptionError
from spark_bridge.read import read_topic
from spark_bridge.relation import expand, net_relation, record_columns
from spark_bridge.session import (
    SparkUnavailable,
    clear_skipped_records,
    register,
    skipped_records,
    spark_session,
)

__all__ = [
    "META_COLUMNS",
    "STATS_TOPIC",
    "BadRecord",
    "BadRecordError",
    "OptionError",
    "SparkUnavailable",
    "clear_skipped_records",
    "expand",
    "key_aggregates",
    "latency_distribution",
    "latency_series",
    "net_relation",
    "plan_changes",
    "read_topic",
    "record_columns",
    "register",
    "skipped_records",
    "spark_session",
]
