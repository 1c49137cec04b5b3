"""Which byte encoding should batch envelopes use? Measure the candidates on a realistic batch.

Every candidate turns a :class:`Batch` into bytes and back into a ``Batch`` (numpy columns,
``VarColumn`` strings), because that round trip is what an internal topic costs a stage. The
candidates are the custom layout of ``topics.envelope``, Arrow IPC streams, an Avro record with
one ``bytes`` field per column, and pickle protocol 5. ``probe_garbage`` feeds truncated and
corrupted messages to each decoder and counts how each one fails, since envelopes come off a
topic anyone can write to.

Run: ``python -m processors.bench.envelope_codecs`` (prints markdown tables).
"""

from __future__ import annotations

import io
import pickle
import random
import timeit
from collections import Counter
from collections.abc import Callable

import fastavro
import numpy as np
import pyarrow as pa

from processors.core.batch import Batch, Column, VarColumn
from topics.envelope import decode_batch, encode_batch

Codec = tuple[Callable[[Batch], bytes], Callable[[bytes], Batch]]


def realistic_batch(n: int, seed: int = 7) -> Batch:
    """Sensor readings: 4 numeric columns, a short site name, sign and event time."""
    rng = np.random.default_rng(seed)
    sites = [f"site-{i:03d}" for i in range(200)]
    site = VarColumn.from_values([sites[i] for i in rng.integers(0, len(sites), n)])
    batch = Batch.inserts(
        {
            "sensor_id": rng.integers(0, 10_000, n).astype(np.int64),
            "temperature": rng.normal(20.0, 5.0, n),
            "humidity": rng.random(n).astype(np.float32),
            "level": rng.integers(0, 5, n).astype(np.int32),
            "site": site,
        },
        ts=1_790_000_000_000 + np.arange(n, dtype=np.int64) * 10,
    )
    batch.meta["stream"] = "r"
    return batch


# --- (b) Arrow IPC stream -------------------------------------------------------------------


def _to_arrow(col: Column) -> pa.Array:
    if isinstance(col, VarColumn):
        kind = pa.large_string() if col.utf8 else pa.large_binary()
        bufs = [None, pa.py_buffer(col.offsets), pa.py_buffer(col.data)]
        return pa.Array.from_buffers(kind, len(col), bufs)
    return pa.array(col)


def arrow_encode(batch: Batch) -> bytes:
    cols = {"__sign": batch.sign, "__ts": batch.ts, **batch.columns}
    rb = pa.RecordBatch.from_arrays(
        [_to_arrow(c) for c in cols.values()], names=list(cols), metadata=batch.meta
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rb.schema) as writer:
        writer.write_batch(rb)
    return sink.getvalue().to_pybytes()


def _from_arrow(arr: pa.Array) -> Column:
    if pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type):
        _, offs, data = arr.buffers()
        offsets = np.frombuffer(offs, np.int64, len(arr) + 1, arr.offset * 8)
        return VarColumn(offsets, np.frombuffer(data, np.uint8), pa.types.is_large_string(arr.type))
    return arr.to_numpy(zero_copy_only=False)


def _arrow_decoder(validate: bool) -> Callable[[bytes], Batch]:
    def decode(data: bytes) -> Batch:
        rb = pa.ipc.open_stream(data).read_next_batch()
        if validate:
            rb.validate(full=True)
        cols = [_from_arrow(c) for c in rb.columns]
        meta = {k.decode(): v.decode() for k, v in (rb.schema.metadata or {}).items()}
        named = dict(zip(rb.schema.names[2:], cols[2:], strict=True))
        return Batch(named, cols[0], cols[1], None, meta)

    return decode


# --- (c) Avro record, one bytes field per column (schema known out of band) ------------------

_avro_cache: dict[tuple, tuple[dict, list[tuple[str, str]]]] = {}


def _avro_schema(batch: Batch) -> tuple[dict, list[tuple[str, str]]]:
    """Parsed record schema and (column, dtype or 'utf8'/'binary') layout for this batch shape."""
    layout = [
        (k, ("utf8" if c.utf8 else "binary") if isinstance(c, VarColumn) else c.dtype.str)
        for k, c in batch.columns.items()
    ]
    sig = tuple(layout)
    if sig not in _avro_cache:
        fields = [{"name": "sign", "type": "bytes"}, {"name": "ts", "type": "bytes"}]
        fields.append({"name": "meta", "type": {"type": "map", "values": "string"}})
        for i, (_, kind) in enumerate(layout):
            if kind in ("utf8", "binary"):
                fields.append({"name": f"c{i}_offsets", "type": "bytes"})
            fields.append({"name": f"c{i}", "type": "bytes"})
        schema = {"type": "record", "name": "Envelope", "fields": fields}
        _avro_cache[sig] = (fastavro.parse_schema(schema), layout)
    return _avro_cache[sig]


def avro_encode(batch: Batch) -> bytes:
    schema, _ = _avro_schema(batch)
    rec: dict[str, object] = {"sign": batch.sign.tobytes(), "ts": batch.ts.tobytes()}
    rec["meta"] = batch.meta
    for i, col in enumerate(batch.columns.values()):
        if isinstance(col, VarColumn):
            rec[f"c{i}_offsets"] = col.offsets.tobytes()
            rec[f"c{i}"] = col.data.tobytes()
        else:
            rec[f"c{i}"] = col.tobytes()
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema, rec)
    return out.getvalue()


def _avro_decoder(template: Batch) -> Callable[[bytes], Batch]:
    schema, layout = _avro_schema(template)

    def decode(data: bytes) -> Batch:
        rec = fastavro.schemaless_reader(io.BytesIO(data), schema, None)
        cols: dict[str, Column] = {}
        for i, (name, kind) in enumerate(layout):
            if kind in ("utf8", "binary"):
                offsets = np.frombuffer(rec[f"c{i}_offsets"], np.int64)
                values = np.frombuffer(rec[f"c{i}"], np.uint8)
                cols[name] = VarColumn(offsets, values, kind == "utf8")
            else:
                cols[name] = np.frombuffer(rec[f"c{i}"], np.dtype(kind))
        sign, ts = np.frombuffer(rec["sign"], np.int8), np.frombuffer(rec["ts"], np.int64)
        return Batch(cols, sign, ts, None, dict(rec["meta"]))

    return decode


# --- (d) pickle protocol 5 -------------------------------------------------------------------


def pickle_encode(batch: Batch) -> bytes:
    cols = {
        k: (c.offsets, c.data, c.utf8) if isinstance(c, VarColumn) else c
        for k, c in batch.columns.items()
    }
    return pickle.dumps((cols, batch.sign, batch.ts, batch.meta), protocol=5)


def pickle_decode(data: bytes) -> Batch:
    cols, sign, ts, meta = pickle.loads(data)  # noqa: S301 - benchmark only, never on topics
    cols = {k: VarColumn(*c) if isinstance(c, tuple) else c for k, c in cols.items()}
    return Batch(cols, sign, ts, None, meta)


def codecs(template: Batch) -> dict[str, Codec]:
    """The candidates, by name; Avro needs a template batch for its out-of-band schema."""
    return {
        "custom (topics.envelope)": (encode_batch, decode_batch),
        "arrow-ipc + full validate": (arrow_encode, _arrow_decoder(True)),
        "arrow-ipc, no validate": (arrow_encode, _arrow_decoder(False)),
        "avro bytes-per-column": (avro_encode, _avro_decoder(template)),
        "pickle-5": (pickle_encode, pickle_decode),
    }


def _best_us(fn: Callable[[], object], repeat: int) -> float:
    timer = timeit.Timer(fn)
    number, _ = timer.autorange()
    return min(timer.repeat(repeat, number)) / number * 1e6


def measure_envelope_codecs(
    n_tuples_list: tuple[int, ...] = (100, 1000, 10000), repeat: int = 5
) -> list[dict]:
    """Best-of-``repeat`` encode and decode time per batch, throughput and size, per codec."""
    rows: list[dict] = []
    for n in n_tuples_list:
        batch = realistic_batch(n)
        for name, (enc, dec) in codecs(batch).items():
            msg = enc(batch)
            if not dec(msg).equals(batch):
                raise AssertionError(f"{name} does not round-trip a batch of {n}")
            enc_us = _best_us(lambda e=enc, b=batch: e(b), repeat)
            dec_us = _best_us(lambda d=dec, m=msg: d(m), repeat)
            total = enc_us + dec_us
            rows.append(
                {
                    "codec": name,
                    "n_tuples": n,
                    "encode_us": round(enc_us, 1),
                    "decode_us": round(dec_us, 1),
                    "us_per_batch": round(total, 1),
                    "tuples_per_s": round(n / total * 1e6),
                    "bytes_per_tuple": round(len(msg) / n, 2),
                }
            )
    return rows


def _unsafe(batch: Batch) -> bool:
    """Would a kernel read out of bounds: offsets not 0-based, decreasing or past the data?"""
    for col in batch.columns.values():
        if isinstance(col, VarColumn):
            o = col.offsets
            if o[0] != 0 or np.any(np.diff(o) < 0) or o[-1] > len(col.data):
                return True
    return False


def probe_garbage(n_tuples: int = 100, flips: int = 2000, seed: int = 1) -> dict[str, Counter]:
    """How decoders fail on every truncation and on random byte corruptions of a valid message.

    Outcomes are the exception type names, ``accepted`` when garbage decoded into a usable batch
    (for a corrupted data byte that is unavoidable without a checksum), or ``accepted UNSAFE``
    when the batch's offsets would send a kernel out of bounds. Pickle is left out: unpickling
    untrusted bytes can run code, which disqualifies it before any count.
    """
    batch = realistic_batch(n_tuples)
    rnd = random.Random(seed)
    out: dict[str, Counter] = {}
    for name, (enc, dec) in codecs(batch).items():
        if name.startswith("pickle"):
            continue
        msg = enc(batch)
        bad = [msg[:i] for i in range(len(msg))]
        for _ in range(flips):
            mutated = bytearray(msg)
            mutated[rnd.randrange(len(msg))] = rnd.randrange(256)
            bad.append(bytes(mutated))
        tally: Counter = Counter()
        for data in bad:
            try:
                tally["accepted UNSAFE" if _unsafe(dec(data)) else "accepted"] += 1
            except Exception as exc:  # noqa: BLE001 - counting failure kinds is the point
                tally[type(exc).__name__] += 1
        out[name] = tally
    return out


def main() -> None:
    print("| codec | tuples | encode µs | decode µs | µs/batch | tuples/s | bytes/tuple |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in measure_envelope_codecs():
        print(
            f"| {r['codec']} | {r['n_tuples']} | {r['encode_us']} | {r['decode_us']} | "
            f"{r['us_per_batch']} | {r['tuples_per_s']:,} | {r['bytes_per_tuple']} |"
        )
    print("\n| codec | outcomes on truncated / corrupted messages (100 tuples) |\n|---|---|")
    for name, tally in probe_garbage().items():
        print(f"| {name} | {', '.join(f'{k}: {v}' for k, v in tally.most_common())} |")


if __name__ == "__main__":
    main()
