"""Raw Kafka messages -> Arrow record batches of typed columns, with the bulk Avro codec.

Runs on executors and needs no Spark: the values' Arrow buffers go to
:meth:`topics.columnar.RecordCodec.decode_many` as they are, decoded numpy columns become Arrow
arrays without per-row Python, and every message that does not decode comes back as a
:class:`BadRecord` with its offset and the reason, never silently lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from processors.core.batch import Column, VarColumn, null_column
from spark_bridge.leaves import Leaf, leaves, tree
from topics.avro import RegistryCodec, SchemaError, SchemaStore, schema_name
from topics.columnar import RecordCodec

_MAX_INT32 = 2**31 - 1


@dataclass(frozen=True)
class BadRecord:
    """A message that could not be read as a record of the reader schema."""

    topic: str
    partition: int
    offset: int
    reason: str

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}] offset {self.offset}: {self.reason}"


class BadRecordError(ValueError):
    """A read met records that do not decode, and its policy is to fail (onBadRecord=fail)."""

    def __init__(self, bad: Sequence[BadRecord]) -> None:
        self.bad = list(bad)
        more = f" (and {len(bad) - 1} more in the same batch)" if len(bad) > 1 else ""
        super().__init__(
            f"record does not decode: {bad[0]}{more}; "
            "use option onBadRecord=skip to skip and count such records"
        )


def _binary_parts(arr: pa.BinaryArray) -> tuple[np.ndarray, np.ndarray]:
    """(data bytes, int64 offsets[n+1]) of a binary array, without copying the data."""
    if pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.binary())
    n = len(arr)
    buffers = arr.buffers()
    offsets = np.frombuffer(buffers[1], np.int32, count=n + 1, offset=4 * arr.offset)
    data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    return data, offsets.astype(np.int64)


def var_to_arrow(col: VarColumn, string: bool) -> pa.Array:
    """A VarColumn as an Arrow string/binary array over the same bytes."""
    n = len(col)
    base = int(col.offsets[0])
    size = int(col.offsets[-1]) - base
    if size > _MAX_INT32:
        raise ValueError(f"{size} bytes of values in one batch; lower maxBatchRows")
    offsets = (col.offsets - base).astype(np.int32)
    data = col.data[base : base + size]
    kind = pa.string() if string else pa.binary()
    return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def repeated_string(value: str, n: int) -> pa.Array:
    raw = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)]
    )


def with_nulls(arr: pa.Array, nulls: np.ndarray | None) -> pa.Array:
    """``arr`` with validity from a companion null column (True = null); the same buffers."""
    if nulls is None or not nulls.any():
        return arr
    validity = pa.py_buffer(np.packbits(~np.asarray(nulls, np.bool_), bitorder="little"))
    if arr.offset:
        arr = pa.concat_arrays([arr])  # from_buffers below starts at bit 0 of the validity
    return pa.Array.from_buffers(arr.type, len(arr), [validity, *arr.buffers()[1:]])


def decimals(col: VarColumn, precision: int, scale: int) -> pa.Array:
    """Avro decimals (big-endian two's complement, any length) as Arrow decimal128, in bulk."""
    n = len(col)
    starts, ends = col.offsets[:-1], col.offsets[1:]
    idx = ends[:, None] - 16 + np.arange(16)  # the last 16 bytes of each value, big-endian
    inside = idx >= starts[:, None]
    data = col.data if len(col.data) else np.zeros(1, np.uint8)
    raw = data[np.clip(idx, 0, len(data) - 1)]
    first = data[np.clip(starts, 0, len(data) - 1)]
    sign = np.where((ends > starts) & (first >= 0x80), 0xFF, 0).astype(np.uint8)
    big = np.where(inside, raw, sign[:, None]).astype(np.uint8)
    little = np.ascontiguousarray(big[:, ::-1])
    kind = pa.decimal128(precision, scale)
    return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(little.tobytes())])


def leaf_array(leaf: Leaf, columns: dict[str, Column]) -> pa.Array:
    """One decoded leaf column as its Spark-side Arrow array, nulls from its ``?`` companion."""
    f = leaf.field
    col = columns[f.name]
    if isinstance(col, VarColumn):
        if pa.types.is_decimal(leaf.arrow):
            arr = decimals(col, leaf.precision, leaf.scale)
        else:
            arr = var_to_arrow(col, f.type == "string")
    elif f.type == "enum":
        arr = pc.take(pa.array(f.symbols, pa.string()), pa.array(col))
    elif pa.types.is_timestamp(leaf.arrow):
        unit = "ms" if f.logical == "timestamp-millis" else "us"
        arr = pa.array(np.asarray(col, np.int64)).view(pa.timestamp(unit, tz="UTC"))
        arr = arr.cast(leaf.arrow)  # an overflow of microseconds fails loudly, never wraps
    elif pa.types.is_date32(leaf.arrow):
        arr = pa.array(np.asarray(col, np.int32)).view(pa.date32())
    else:
        arr = pa.array(col, leaf.arrow)
    return with_nulls(arr, columns.get(null_column(f.name)))


def _node_array(node: Leaf | dict, columns: dict[str, Column]) -> pa.Array:
    """A leaf's array, or a nested record's struct array of its children."""
    if isinstance(node, Leaf):
        return leaf_array(node, columns)
    children = [_node_array(v, columns) for v in node.values()]
    return pa.StructArray.from_arrays(children, names=list(node))


def timestamps_us(ms: np.ndarray) -> pa.Array:
    """Kafka timestamps (ms; -1 when the message has none) as UTC microsecond timestamps."""
    arr = pa.array(ms * 1000, pa.int64(), mask=ms < 0 if bool((ms < 0).any()) else None)
    return arr.cast(pa.timestamp("us", tz="UTC"))


class ChunkDecoder:
    """Decodes message values of one reader schema into the columns a Spark schema asks for."""

    def __init__(
        self, reader_schema: dict, registry: str | RegistryCodec | None, target: pa.Schema
    ) -> None:
        self.leaves = leaves(reader_schema)
        self.tree = tree(self.leaves)
        if isinstance(registry, str):  # a reader looks schemas up, it never registers one
            registry = RegistryCodec(registry, auto_register=False)
        try:
            self.codec = RecordCodec(reader_schema, store=SchemaStore(), registry=registry)
        except Exception as exc:
            if getattr(exc, "http_status_code", None) != 404:
                raise
            raise SchemaError(
                f"reader schema {schema_name(reader_schema)} is not registered in the schema "
                "registry (subject: its full name); register it, or give no schema option to "
                "read with the writer schema"
            ) from exc
        self.target = target

    def columns(self, values: pa.BinaryArray) -> tuple[dict[str, pa.Array], np.ndarray, list]:
        """Decoded record fields of the good values, their indices, and (index, reason) errors."""
        data, offsets = _binary_parts(values)
        result = self.codec.decode_many(data, offsets)
        errors = list(result.errors)
        if values.null_count:
            nulls = set(np.flatnonzero(~np.asarray(values.is_valid())).tolist())
            errors = [(i, "null value (a tombstone, not a record)") if i in nulls else (i, r)
                      for i, r in errors]  # fmt: skip
        wanted = set(self.target.names)
        cols = {
            name: _node_array(node, result.columns)
            for name, node in self.tree.items()
            if name in wanted
        }
        return cols, result.good, errors

    def decode(
        self,
        topic: str,
        partition: int,
        values: pa.BinaryArray,
        keys: pa.BinaryArray,
        offsets: np.ndarray,
        timestamps_ms: np.ndarray,
        signs: np.ndarray,
        header_errors: Sequence[tuple[int, str]] = (),
    ) -> tuple[pa.RecordBatch, list[BadRecord]]:
        """One record batch of the good messages (input order) and the bad ones."""
        cols, good, errors = self.columns(values)
        if header_errors:
            known = {i for i, _ in errors}
            errors = sorted([*errors, *(e for e in header_errors if e[0] not in known)])
            drop = np.isin(good, np.array([i for i, _ in header_errors], np.int64))
            if drop.any():
                keep = np.flatnonzero(~drop)
                cols = {name: col.take(pa.array(keep)) for name, col in cols.items()}
                good = good[keep]
        bad = [BadRecord(topic, partition, int(offsets[i]), reason) for i, reason in errors]
        n = len(good)
        everything = n == len(offsets)

        def pick(column: np.ndarray) -> np.ndarray:
            return column if everything else column[good]

        meta = {
            "_topic": lambda: repeated_string(topic, n),
            "_partition": lambda: pa.array(np.full(n, partition, np.int32)),
            "_offset": lambda: pa.array(pick(offsets)),
            "_timestamp": lambda: timestamps_us(pick(timestamps_ms)),
            "_sign": lambda: pa.array(pick(signs)),
            "_key": lambda: keys if everything else keys.take(pa.array(good)),
        }
        arrays = []
        for f in self.target:
            arr = cols[f.name] if f.name in cols else meta[f.name]()
            arrays.append(arr if arr.type == f.type else arr.cast(f.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.target), bad
