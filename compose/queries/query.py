"""The query every worker replica runs (mounted at /queries/query.py): hot readings."""

from processors.core.query import Query, col
from topics.avro import load_schema

query = Query("compose-hot-readings")
query.stream("r", topic="readings", schema=load_schema("reading"), key="sensor_id",
             timestamp="ts", partitions=12)  # fmt: skip
query.where(col("r.temperature") > 30.0, col("r.ok") == True)  # noqa: E712
query.into("readings.hot", partitions=12)
