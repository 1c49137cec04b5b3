"""Bulk Avro codec: many one-record messages <-> the columns of a :class:`Batch`.

The runtime hands over all message values of a fetch concatenated (``buf`` plus ``offsets``).
Headers are checked in one kernel call, records are grouped by writer schema, each group is
decoded by :mod:`topics.avro_kernels` with the writer's layout, and schema resolution (defaults,
skipped fields, promotions, enum symbol mapping) is done per column with numpy, not per record.
Bad records never fail the call: they come back in ``errors`` with a reason, for the dead-letter
topic. Writer schemas the kernels cannot read (e.g. a union the reader ignores) fall back to
fastavro per record, which is slow but keeps such records flowing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from processors.core.batch import Column, VarColumn
from topics import avro_kernels as K
from topics.avro import (
    FlatField,
    RegistryCodec,
    Resolution,
    SchemaError,
    SchemaStore,
    confluent_header,
    decode_body,
    decode_single_object,
    encode_single_object,
    flat_fields,
    resolve_flat,
    single_object_header,
)

DTYPES = {
    "boolean": np.dtype(np.bool_),
    "int": np.dtype(np.int32),
    "long": np.dtype(np.int64),
    "float": np.dtype(np.float32),
    "double": np.dtype(np.float64),
    "enum": np.dtype(np.int32),
}
_REASONS = {
    K.TRUNCATED: "truncated record",
    K.VARINT_OVERFLOW: "varint overflow",
    K.NEGATIVE_LENGTH: "negative length",
    K.LENGTH_PAST_END: "length past the end of the record",
    K.ENUM_OUT_OF_RANGE: "enum index out of range",
    K.BAD_BOOLEAN: "invalid boolean byte",
    K.BAD_UTF8: "invalid UTF-8",
}


@dataclass
class DecodeResult:
    """Decoded columns of the good records (input order kept) and a reason for every bad one."""

    columns: dict[str, Column]  # reader-schema field order
    good: np.ndarray  # int64 input indices of the decoded records
    errors: list[tuple[int, str]]  # (input index, reason), ascending by index

    def __len__(self) -> int:
        return len(self.good)


@dataclass
class _Plan:
    """A writer's :class:`Resolution` plus the arrays the decode kernel reads."""

    writer: dict
    res: Resolution
    fields: list[FlatField]  # writer fields
    types: np.ndarray  # int8 type code per writer field
    enum_n: np.ndarray  # int32 symbol count per writer field
    var_slot: np.ndarray  # int32 row in lens for string/bytes fields, else -1
    check_utf8: np.ndarray  # bool: the reader reads this field as a string
    luts: list[np.ndarray | None]  # per reader field: enum index map


def _make_plan(writer: dict, reader: dict, rfields: list[FlatField]) -> _Plan:
    res = resolve_flat(writer, reader, rfields)
    wf = res.writer_fields or []
    check = np.zeros(len(wf), np.bool_)
    for rf, w in zip(rfields, res.sources, strict=True):
        if w >= 0:
            check[w] = rf.type == "string"
    luts = [None if m is None else np.array(m or [0], np.int32) for m in res.enum_maps]
    types = np.array([K.TYPE_CODES[f.type] for f in wf], np.int8)
    enum_n = np.array([len(f.symbols) for f in wf], np.int32)
    return _Plan(writer, res, wf, types, enum_n, _var_slots(wf), check, luts)


def _var_slots(fields: list[FlatField]) -> np.ndarray:
    slots = np.full(len(fields), -1, np.int32)
    var = [i for i, f in enumerate(fields) if f.type in ("string", "bytes")]
    slots[var] = np.arange(len(var), dtype=np.int32)
    return slots


def _default_column(f: FlatField, n: int) -> Column:
    if f.type in ("string", "bytes"):
        raw = f.default.encode("utf-8" if f.type == "string" else "latin-1")
        data = np.frombuffer(raw * n, np.uint8).copy()
        return VarColumn(np.arange(n + 1, dtype=np.int64) * len(raw), data, f.type == "string")
    value = f.symbols.index(f.default) if f.type == "enum" else f.default
    return np.full(n, value, DTYPES[f.type])


def _zero_column(f: FlatField) -> Column:
    """One value of ``f``'s type: zero, the empty string, the first enum symbol."""
    if f.type in ("string", "bytes"):
        return VarColumn(np.zeros(2, np.int64), np.zeros(0, np.uint8), f.type == "string")
    return np.zeros(1, DTYPES[f.type])


def _empty_column(f: FlatField) -> Column:
    if f.type in ("string", "bytes"):
        return VarColumn(np.zeros(1, np.int64), np.zeros(0, np.uint8), f.type == "string")
    return np.zeros(0, DTYPES[f.type])


class RecordCodec:
    """Reads any known writer schema's messages as ``reader_schema`` columns, and writes them.

    Framing is single-object encoding with ``store`` (default: every .avsc in schemas_dir plus
    the reader schema), or the Confluent wire format when ``registry`` is given.
    """

    def __init__(
        self,
        reader_schema: dict,
        store: SchemaStore | None = None,
        registry: RegistryCodec | None = None,
    ) -> None:
        self.schema = reader_schema
        self.fields = flat_fields(reader_schema)
        self.registry = registry
        self.store = store if store is not None else SchemaStore()
        if registry is None:
            self.store.add(reader_schema)
            self.header = single_object_header(reader_schema)
            self._framing = K.FRAMING_SINGLE_OBJECT
        else:
            self.header = confluent_header(registry.schema_id(reader_schema))
            self._framing = K.FRAMING_CONFLUENT
        self._types = np.array([K.TYPE_CODES[f.type] for f in self.fields], np.int8)
        self._var_slot = _var_slots(self.fields)
        self._plans: dict[int, _Plan] = {}

    # --- decoding -------------------------------------------------------------------------

    def _plan(self, key: int) -> _Plan:
        plan = self._plans.get(key)
        if plan is None:
            if self.registry is not None:
                writer = self.registry.writer_schema(key)
            else:
                writer = self.store.by_fingerprint(key)
            plan = self._plans[key] = _make_plan(writer, self.schema, self.fields)
        return plan

    def decode_many(self, buf: np.ndarray | bytes, offsets: np.ndarray) -> DecodeResult:
        """Decode messages ``buf[offsets[i]:offsets[i+1]]``; bad ones become errors."""
        data = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, np.uint8)
        offs = np.ascontiguousarray(offsets, dtype=np.int64)
        n = len(offs) - 1
        if n < 0 or offs[0] < 0 or offs[-1] > len(data) or np.any(np.diff(offs) < 0):
            raise ValueError("offsets must be non-decreasing and within buf")
        hstatus, keys, body = K.parse_headers(data, offs, self._framing)
        errors: list[tuple[int, str]] = []
        for i in np.flatnonzero(hstatus).tolist():
            errors.append((i, self._header_reason(data, offs, i, hstatus[i])))
        ok = np.flatnonzero(hstatus == 0)
        okkeys = keys[ok]
        if len(ok) and np.all(okkeys == okkeys[0]):
            groups = [(int(okkeys[0]), ok)]
        else:
            uniq, inv = np.unique(okkeys, return_inverse=True)
            groups = [(int(k), ok[inv == j]) for j, k in enumerate(uniq)]
        pieces: list[tuple[np.ndarray, dict[str, Column]]] = []
        for key, idx in groups:
            try:
                plan = self._plan(key)
            except SchemaError as exc:
                errors.extend((i, str(exc)) for i in idx.tolist())
                continue
            if plan.res.error is not None:
                errors.extend((i, plan.res.error) for i in idx.tolist())
                continue
            decode = self._decode_fallback if plan.res.writer_fields is None else self._decode_group
            pieces.append(decode(plan, data, offs, body, idx, errors))
        errors.sort()
        return self._assemble(pieces, errors)

    def _header_reason(self, data: np.ndarray, offs: np.ndarray, i: int, st: int) -> str:
        size, head = offs[i + 1] - offs[i], bytes(data[offs[i] : min(offs[i + 1], offs[i] + 2)])
        so = self._framing == K.FRAMING_SINGLE_OBJECT
        if st == K.BAD_MARKER:
            return f"not single-object encoded (marker {head!r})" if so else (
                f"not Confluent wire format (magic byte {head[:1]!r})")  # fmt: skip
        kind = "single-object" if so else "Confluent"
        return f"message of {size} bytes is too short for a {kind} header"

    def _decode_group(self, plan: _Plan, data, offs, body, idx, errors) -> tuple[np.ndarray, dict]:
        m, nf = len(idx), len(plan.fields)
        vals = np.empty((nf, m), np.int64)
        lens = np.empty((max(int((plan.var_slot >= 0).sum()), 1), m), np.int64)
        status = np.empty(m, np.int8)
        err_pos = np.empty(m, np.int64)
        err_field = np.empty(m, np.int32)
        starts, ends = body[idx], offs[idx + 1]
        K.decode_bodies(data, starts, ends, plan.types, plan.enum_n, plan.check_utf8,
                        plan.var_slot, vals, lens, status, err_pos, err_field)  # fmt: skip
        good_mask = status == 0
        ops = list(zip(self.fields, plan.res.sources, plan.luts, strict=True))
        for rf, w, lut in ops:  # enum symbols the reader does not know
            if lut is not None and np.any(lut < 0):
                mapped = lut[np.where(good_mask, vals[w], 0)]
                for j in np.flatnonzero(good_mask & (mapped < 0)).tolist():
                    sym = plan.fields[w].symbols[vals[w, j]]
                    reason = f"enum symbol '{sym}' of field '{rf.name}' is unknown to the reader"
                    errors.append((int(idx[j]), reason))
                good_mask &= ~((mapped < 0) & good_mask)
        for j in np.flatnonzero(status).tolist():
            i, st, f = int(idx[j]), int(status[j]), int(err_field[j])
            at = int(err_pos[j] - offs[i])
            if st == K.TRAILING_BYTES:
                errors.append((i, f"trailing bytes: {int(ends[j] - err_pos[j])} at byte {at}"))
            else:
                errors.append((i, f"{_REASONS[st]} at byte {at} in field '{plan.fields[f].name}'"))
        all_good = bool(good_mask.all())
        sel = None if all_good else np.flatnonzero(good_mask)
        m_good = m if all_good else len(sel)
        cols: dict[str, Column] = {}
        for rf, w, lut in ops:
            if w < 0:
                cols[rf.name] = _default_column(rf, m_good)
                continue
            raw = vals[w] if sel is None else vals[w, sel]
            wt = plan.fields[w].type
            if wt in ("string", "bytes"):
                ln = lens[plan.var_slot[w]]
                o, d = K.gather_slices(data, raw, ln if sel is None else ln[sel])
                cols[rf.name] = VarColumn(o, d, rf.type == "string")
                continue
            if wt == "float":
                col = raw.astype(np.uint32).view(np.float32)
            elif wt == "double":
                col = raw.view(np.float64)
            elif lut is not None:
                col = lut[raw]
            else:
                col = raw.astype(DTYPES[wt], copy=False)
            cols[rf.name] = col.astype(DTYPES[rf.type], copy=False)
        return idx if sel is None else idx[sel], cols

    def _decode_fallback(self, plan: _Plan, data, offs, body, idx, errors) -> tuple:
        """fastavro per record, for writer schemas the kernels do not support."""
        rows, good = [], []
        for i in idx.tolist():
            try:
                rows.append(
                    decode_body(data[body[i] : offs[i + 1]].tobytes(), plan.writer, self.schema)
                )
                good.append(i)
            except (ValueError, SchemaError) as exc:
                errors.append((i, str(exc)))
        return np.array(good, np.int64), self._columns_from_rows(rows)

    def _columns_from_rows(self, rows: list[dict]) -> dict[str, Column]:
        cols: dict[str, Column] = {}
        for f in self.fields:
            values = [r[f.name] for r in rows]
            if f.type in ("string", "bytes"):
                cols[f.name] = VarColumn.from_values(values, utf8=f.type == "string")
            elif f.type == "enum":
                cols[f.name] = np.array([f.symbols.index(v) for v in values], np.int32)
            else:
                cols[f.name] = np.array(values, DTYPES[f.type])
        return cols

    def _assemble(self, pieces, errors) -> DecodeResult:
        if len(pieces) == 1:
            return DecodeResult(pieces[0][1], pieces[0][0].astype(np.int64, copy=False), errors)
        if not pieces:
            cols = {f.name: _empty_column(f) for f in self.fields}
            return DecodeResult(cols, np.zeros(0, np.int64), errors)
        idx = np.concatenate([p[0] for p in pieces]).astype(np.int64)
        order = np.argsort(idx, kind="stable")
        cols = {}
        for f in self.fields:
            parts = [p[1][f.name] for p in pieces]
            if isinstance(parts[0], VarColumn):
                cols[f.name] = VarColumn.concat(parts).take(order)
            else:
                cols[f.name] = np.concatenate(parts)[order]
        return DecodeResult(cols, idx[order], errors)

    # --- encoding -------------------------------------------------------------------------

    def encode_many(self, columns: Mapping[str, Column], n: int) -> tuple[np.ndarray, np.ndarray]:
        """n complete messages (header + body) as one buffer plus int64 offsets[n+1]."""
        vals = np.empty((len(self.fields), n), np.int64)
        var_cols: list[VarColumn] = []
        for fi, f in enumerate(self.fields):
            col = columns.get(f.name)
            if col is None:
                if not f.has_default:
                    raise SchemaError(f"no column for field '{f.name}' (it has no default)")
                col = _default_column(f, n)
            if f.type in ("string", "bytes"):
                if not isinstance(col, VarColumn):
                    col = VarColumn.from_values(list(col), utf8=f.type == "string")
                if len(col) != n:
                    raise ValueError(f"column '{f.name}' has {len(col)} values, expected {n}")
                var_cols.append(col)
                continue
            vals[fi] = _fixed_bits(f, np.asarray(col), n)
        lens = np.empty((max(len(var_cols), 1), n), np.int64)
        base, datas = 0, []
        for slot, (fi, col) in enumerate(zip(np.flatnonzero(self._var_slot >= 0), var_cols,
                                             strict=True)):  # fmt: skip
            vals[fi] = col.offsets[:-1] + (base - int(col.offsets[0]))
            lens[slot] = np.diff(col.offsets)
            datas.append(col.data[col.offsets[0] : col.offsets[-1]])
            base += int(col.offsets[-1] - col.offsets[0])
        var_data = datas[0] if len(datas) == 1 else np.concatenate([np.zeros(0, np.uint8), *datas])
        fixed = sum(K.MAX_FIXED_SIZE.get(int(t), 10) for t in self._types)
        out = np.empty(n * (len(self.header) + fixed) + base, np.uint8)
        header = np.frombuffer(self.header, np.uint8)
        offsets = K.encode_bodies(header, self._types, self._var_slot, vals, var_data, lens, out)
        return out[: offsets[n]], offsets

    def warm_up(self) -> dict[str, Column]:
        """Encode and decode one zero-valued record, and return its columns.

        The first numba kernel a process runs costs ~0.1 s (numba starts up and loads its
        cache); a worker calls this before consuming so that the first batch's measured time,
        which feeds the scheduler's per-tuple costs, is the batch's own.
        """
        columns = {f.name: _zero_column(f) for f in self.fields}
        buf, offsets = self.encode_many(columns, 1)
        result = self.decode_many(buf, offsets)
        if result.errors:
            raise SchemaError(f"warm-up record did not decode: {result.errors[0][1]}")
        return result.columns

    # --- one record (tests, tools) -----------------------------------------------------------

    def decode_one(self, value: bytes) -> dict:
        if self.registry is not None:
            return self.registry.decode(value, self.schema)
        return decode_single_object(value, self.schema, self.store)

    def encode_one(self, record: dict) -> bytes:
        if self.registry is not None:
            return self.registry.encode(self.schema, record)
        return encode_single_object(self.schema, record)


_INT_RANGE = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}


def _fixed_bits(f: FlatField, col: np.ndarray, n: int) -> np.ndarray:
    """A fixed-size column as the int64 row the encode kernel reads; checks dtype and range."""
    if col.shape != (n,):
        raise ValueError(f"column '{f.name}' has shape {col.shape}, expected ({n},)")
    if f.type == "float":
        return col.astype(np.float32, copy=False).view(np.uint32)
    if f.type == "double":
        return col.astype(np.float64, copy=False).view(np.int64)
    if f.type == "boolean":
        return col.astype(np.bool_, copy=False)
    if col.dtype.kind not in "iub":
        raise SchemaError(f"column '{f.name}' has dtype {col.dtype}, expected {f.type} integers")
    lo, hi = (0, len(f.symbols) - 1) if f.type == "enum" else _INT_RANGE[f.type]
    needs_check = f.type == "enum" or not np.can_cast(col.dtype, DTYPES[f.type])
    if n and needs_check and (int(col.min()) < lo or int(col.max()) > hi):
        raise ValueError(f"column '{f.name}' has values outside {f.type} range [{lo}, {hi}]")
    return col
