"""The net relation of a signed result topic: inserts minus deletes, as a multiset.

A result topic is a stream of changes to the query's result relation: records without a sign
header insert a row, records with ``streamon.sign: -1`` delete one equal row (window expiry,
an aggregate's old value). Summing the signs per distinct row gives each row's multiplicity in
the relation as of the offsets read.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F

from spark_bridge.options import META_COLUMNS

COUNT = "_count"


def record_columns(df: Any) -> list[str]:
    """The record's own columns of a DataFrame read from a topic (no metadata columns)."""
    return [c for c in df.columns if c not in META_COLUMNS and c != COUNT]


def net_relation(df: Any, columns: list[str] | None = None) -> Any:
    """One row per distinct record with a non-zero multiplicity ``_count`` (a bigint).

    A negative ``_count`` means more deletes than inserts of that row in what was read: a
    range that starts after the insert, or a producer bug. :func:`expand` refuses such rows.
    """
    cols = columns if columns is not None else record_columns(df)
    counted = df.groupBy(*cols).agg(F.sum(F.col("_sign").cast("long")).alias(COUNT))
    return counted.where(F.col(COUNT) != 0)


def expand(net: Any) -> Any:
    """The net relation as plain rows, each repeated ``_count`` times (fails on negatives)."""
    cols = [c for c in net.columns if c != COUNT]
    checked = F.when(
        F.col(COUNT) < 0,
        F.raise_error(
            F.concat(
                F.lit("net relation has a row with count "),
                F.col(COUNT).cast("string"),
                F.lit(": more deletes than inserts were read"),
            )
        ),  # fmt: skip
    ).otherwise(F.col(COUNT))
    repeated = F.explode(F.sequence(F.lit(1), checked.cast("int")))
    return net.select(*cols, repeated.alias("_n")).drop("_n")
