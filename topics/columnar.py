"""Bulk Avro codec: many one-record messages <-> the columns of a :class:`Batch`.

The runtime hands over all message values of a fetch concatenated (``buf`` plus ``offsets``).
Headers are checked in one kernel call, records are grouped by writer schema, each group is
decoded by :mod:`topics.avro_kernels` with the writer's layout, and schema resolution (defaults,
skipped fields, promotions, enum symbol mapping) is done per column with numpy, not per record.
Bad records never fail the call: they come back in ``errors`` with a reason, for the dead-letter
topic. Arrays and maps are columns of their exact Avro encoding, skipped with bounds and written
back unchanged (:mod:`topics.avro_collections`). Writer schemas the kernels cannot read (e.g. a
union the reader ignores) fall back to fastavro per record, which is slow but keeps such records
flowing.

Every decode has bounds (:class:`DecodeLimits`): a record over ``max_record_bytes`` is refused
before it is read, and a record taking the per-record path is first walked against its writer
schema, so that a collection's item count can never exceed the bytes left (a block count of
2**62 in a 42-byte record would otherwise keep fastavro busy forever), nor the record's items
``max_collection_items``, nor its nesting ``max_nesting``. Such records become errors with the
reason, like any other bad record.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np

from processors.core.batch import Column, VarColumn, null_column
from topics import avro_collections as C
from topics import avro_kernels as K
from topics.avro import (
    RegistryCodec,
    SchemaError,
    SchemaStore,
    confluent_header,
    decode_body,
    decode_single_object,
    encode_single_object,
    single_object_header,
)
from topics.avro_bounds import DecodeBoundsError, DecodeLimits, check_bounds
from topics.avro_layout import FlatField, Resolution, flat_fields, resolve_flat
from topics.columnar_values import (
    COLLECTIONS,
    DTYPES,
    VAR_TYPES,
    check_sizes,
    columns_from_rows,
    default_column,
    fixed_bits,
    strip_logical,
    zeros,
)

_REASONS = {
    K.TRUNCATED: "truncated record",
    K.VARINT_OVERFLOW: "varint overflow",
    K.NEGATIVE_LENGTH: "negative length",
    K.LENGTH_PAST_END: "length past the end of the record",
    K.ENUM_OUT_OF_RANGE: "enum index out of range",
    K.BAD_BOOLEAN: "invalid boolean byte",
    K.BAD_UTF8: "invalid UTF-8",
    K.BAD_UNION: "union branch index out of range",
    **C.REASONS,
}


@dataclass
class DecodeResult:
    """Decoded columns of the good records (input order kept) and a reason for every bad one."""

    columns: dict[str, Column]  # reader-schema leaf order, each null column after its values
    good: np.ndarray  # int64 input indices of the decoded records
    errors: list[tuple[int, str]]  # (input index, reason), ascending by index

    def __len__(self) -> int:
        return len(self.good)


@dataclass
class _Layout:
    """The per-field arrays the kernels read for one list of leaves."""

    types: np.ndarray  # int8 type code per field
    enum_n: np.ndarray  # int32 symbol count (enum) or size (fixed) per field
    var_slot: np.ndarray  # int32 row in lens for string/bytes/fixed fields, else -1
    null_branch: np.ndarray  # int8 union branch of "null", -1 for fields never null
    null_slot: np.ndarray  # int32 row in nulls for nullable fields, else -1
    nodes: tuple  # item types of the array and map fields (topics.avro_collections.NodeTable)

    @classmethod
    def of(cls, fields: list[FlatField]) -> _Layout:
        types = np.array([K.TYPE_CODES[f.type] for f in fields], np.int8)
        table = C.NodeTable()
        enum_n = np.array([table.add(f.collection_schema, {}) if f.type in COLLECTIONS
                           else len(f.symbols) or f.size for f in fields], np.int32)  # fmt: skip
        null_branch = np.array([f.null_index for f in fields], np.int8)
        return cls(types, enum_n, _slots([f.type in VAR_TYPES for f in fields]), null_branch,
                   _slots([f.nullable for f in fields]), table.arrays())  # fmt: skip

    @property
    def general(self) -> bool:
        """Whether a field is nullable, fixed, an array or a map: the kernels' general (slower)
        variants."""
        return bool((self.null_branch >= 0).any() or (self.types >= K.T_FIXED).any())

    def rows(self, slot: np.ndarray, m: int, dtype: type) -> np.ndarray:
        return np.empty((max(int((slot >= 0).sum()), 1), m), dtype)


@dataclass
class _Plan:
    """A writer's :class:`Resolution` plus the arrays the decode kernel reads."""

    writer: dict
    res: Resolution
    fields: list[FlatField]  # writer fields
    lay: _Layout
    check_utf8: np.ndarray  # bool: the reader reads this field as a string
    luts: list[np.ndarray | None]  # per reader field: enum index map
    plain_writer: object = None  # writer without logical types, for the per-record path


def _make_plan(writer: dict, reader: dict, rfields: list[FlatField]) -> _Plan:
    res = resolve_flat(writer, reader, rfields)
    try:
        lay = _Layout.of(res.writer_fields or [])
    except C.CollectionSchemaError:  # items the kernels cannot skip: the per-record path
        res.writer_fields, lay = None, _Layout.of([])
    wf = res.writer_fields or []
    check = np.zeros(len(wf), np.bool_)
    for rf, w in zip(rfields, res.sources, strict=True):
        if w >= 0:
            check[w] = rf.type == "string"
    luts = [None if m is None else np.array(m or [0], np.int32) for m in res.enum_maps]
    return _Plan(writer, res, wf, lay, check, luts, strip_logical(writer))


def _slots(used: list[bool]) -> np.ndarray:
    """Row numbers 0, 1, ... for the fields that use a row, -1 for the others."""
    slots = np.full(len(used), -1, np.int32)
    which = np.flatnonzero(np.array(used, np.bool_))
    slots[which] = np.arange(len(which), dtype=np.int32)
    return slots


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
        limits: DecodeLimits | None = None,
    ) -> None:
        self.schema = reader_schema
        self.limits = limits if limits is not None else DecodeLimits.current()
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
        self._lay = _Layout.of(self.fields)
        self._plain_schema = strip_logical(reader_schema)
        self._plans: dict[int, _Plan] = {}
        self._encoder = self  # a projection encodes whole records, as the codec it came from

    @property
    def encoder(self) -> RecordCodec:
        """The codec whose whole records this one encodes (itself unless it is a projection)."""
        return self._encoder

    def projected(self, keep: Collection[str]) -> RecordCodec:
        """This codec decoding only the top-level fields ``keep``: Avro's schema resolution
        skips the others (projection pushdown, :mod:`processors.core.plan_columns`). It still
        encodes whole records, as this one does. Itself when ``keep`` names every field;
        SchemaError when the fields kept use a named type that a dropped one defines."""
        fields = [f for f in self.schema["fields"] if f["name"] in keep]
        if len(fields) == len(self.schema["fields"]):
            return self
        out = copy.copy(self)
        out.schema = {**self.schema, "fields": fields}
        out.fields = flat_fields(out.schema)
        out._lay = _Layout.of(out.fields)
        out._plain_schema = strip_logical(out.schema)
        out._plans = {}
        out._encoder = self._encoder
        return out

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
        too_big = np.diff(offs) > self.limits.max_record_bytes
        for i in np.flatnonzero(too_big).tolist():
            size, most = int(offs[i + 1] - offs[i]), self.limits.max_record_bytes
            errors.append((i, f"record of {size} bytes exceeds max_record_bytes ({most})"))
        for i in np.flatnonzero((hstatus != 0) & ~too_big).tolist():
            errors.append((i, self._header_reason(data, offs, i, hstatus[i])))
        ok = np.flatnonzero((hstatus == 0) & ~too_big)
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
        m, lay = len(idx), plan.lay
        vals = np.empty((len(plan.fields), m), np.int64)
        lens = lay.rows(lay.var_slot, m, np.int64)
        nulls = lay.rows(lay.null_slot, m, np.bool_)
        status = np.empty(m, np.int8)
        err_pos = np.empty(m, np.int64)
        err_field = np.empty(m, np.int32)
        starts, ends = body[idx], offs[idx + 1]
        common = (data, starts, ends, lay.types, lay.enum_n, plan.check_utf8, lay.var_slot)
        if lay.general:
            K.decode_bodies_general(*common, lay.null_branch, lay.null_slot, vals, lens, nulls,
                                    status, err_pos, err_field, lay.nodes,
                                    self.limits.max_collection_items, self._stack())  # fmt: skip
        else:  # the flat records of old keep their own, faster kernel
            K.decode_bodies(*common, vals, lens, status, err_pos, err_field)
        good_mask = status == 0
        ops = list(zip(self.fields, plan.res.sources, plan.luts, strict=True))
        for rf, w, lut in ops:
            wnull = None if w < 0 or lay.null_slot[w] < 0 else nulls[lay.null_slot[w]]
            if wnull is not None and not rf.nullable:  # Avro: null matches no reader branch
                bad = good_mask & wnull
                reason = f"field '{rf.name}' is null, and the reader's field is not nullable"
                errors.extend((int(idx[j]), reason) for j in np.flatnonzero(bad).tolist())
                good_mask &= ~bad
            if lut is not None and np.any(lut < 0):  # enum symbols the reader does not know
                known = good_mask if wnull is None else good_mask & ~wnull
                mapped = lut[np.where(known, vals[w], 0)]
                for j in np.flatnonzero(known & (mapped < 0)).tolist():
                    sym = plan.fields[w].symbols[vals[w, j]]
                    reason = f"enum symbol '{sym}' of field '{rf.name}' is unknown to the reader"
                    errors.append((int(idx[j]), reason))
                good_mask &= ~((mapped < 0) & known)
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
            wslot = -1 if w < 0 else lay.null_slot[w]
            if w < 0:
                cols[rf.name] = default_column(rf, m_good)
            else:
                cols[rf.name] = self._column(plan, rf, w, lut, data, vals, lens, sel, nulls)
            if rf.nullable:
                if wslot >= 0:
                    cols[null_column(rf.name)] = nulls[wslot] if sel is None else nulls[wslot, sel]
                else:
                    cols[null_column(rf.name)] = np.full(m_good, w < 0 and rf.default is None)
        return idx if sel is None else idx[sel], cols

    @staticmethod
    def _column(plan: _Plan, rf: FlatField, w: int, lut, data, vals, lens, sel, nulls) -> Column:
        """Reader field ``rf``'s column from writer field ``w``'s row of the decode output."""
        raw = vals[w] if sel is None else vals[w, sel]
        wt = plan.fields[w].type
        if wt in VAR_TYPES:
            ln = lens[plan.lay.var_slot[w]]
            o, d = K.gather_slices(data, raw, ln if sel is None else ln[sel])
            return VarColumn(o, d, rf.type == "string")
        if wt == "float":
            col = raw.astype(np.uint32).view(np.float32)
        elif wt == "double":
            col = raw.view(np.float64)
        elif lut is not None:
            col = lut[raw]
            if plan.lay.null_slot[w] >= 0:  # null rows read index 0, which the lut may not map
                wnull = nulls[plan.lay.null_slot[w]]
                col[wnull if sel is None else wnull[sel]] = 0
        else:
            col = raw.astype(DTYPES[wt], copy=False)
        return col.astype(DTYPES[rf.type], copy=False)

    def _stack(self) -> tuple[np.ndarray, np.ndarray]:
        """The frames :func:`topics.avro_collections.skip_value` nests in: ``max_nesting``."""
        depth = self.limits.max_nesting
        return np.empty(depth, np.int64), np.empty(depth, np.int64)

    def _decode_fallback(self, plan: _Plan, data, offs, body, idx, errors) -> tuple:
        """fastavro per record, for writer schemas the kernels do not support; each record is
        first checked against the decode bounds (fastavro trusts the counts in the data)."""
        rows, good = [], []
        for i in idx.tolist():
            raw = data[body[i] : offs[i + 1]].tobytes()
            try:
                check_bounds(raw, plan.writer, self.limits)
                rows.append(decode_body(raw, plan.plain_writer, self._plain_schema))
                good.append(i)
            except DecodeBoundsError as exc:
                errors.append((i, f"decode bounds: {exc}"))
            except (ValueError, SchemaError) as exc:
                errors.append((i, str(exc)))
        return np.array(good, np.int64), columns_from_rows(self.fields, rows)

    def _assemble(self, pieces, errors) -> DecodeResult:
        if len(pieces) == 1:
            return DecodeResult(pieces[0][1], pieces[0][0].astype(np.int64, copy=False), errors)
        if not pieces:
            cols = self._zero_columns(0)
            return DecodeResult(cols, np.zeros(0, np.int64), errors)
        idx = np.concatenate([p[0] for p in pieces]).astype(np.int64)
        order = np.argsort(idx, kind="stable")
        cols = {}
        for name in pieces[0][1]:
            parts = [p[1][name] for p in pieces]
            if isinstance(parts[0], VarColumn):
                cols[name] = VarColumn.concat(parts).take(order)
            else:
                cols[name] = np.concatenate(parts)[order]
        return DecodeResult(cols, idx[order], errors)

    # --- encoding -------------------------------------------------------------------------

    def encode_many(self, columns: Mapping[str, Column], n: int) -> tuple[np.ndarray, np.ndarray]:
        """n complete messages (header + body) as one buffer plus int64 offsets[n+1].

        A nullable field ``c`` is null where the bool column ``c?`` is True (no such column:
        never null); the value column's entries there are ignored.
        """
        if self._encoder is not self:
            return self._encoder.encode_many(columns, n)
        lay = self._lay
        vals = np.empty((len(self.fields), n), np.int64)
        nulls = lay.rows(lay.null_slot, n, np.bool_)
        var_cols: list[VarColumn] = []
        for fi, f in enumerate(self.fields):
            col, nul = columns.get(f.name), self._nulls(f, columns, n)
            if col is None:
                if not f.has_default:
                    raise SchemaError(f"no column for field '{f.name}' (it has no default)")
                col = default_column(f, n)
                if f.nullable and f.default is None and nul is None:
                    nul = np.ones(n, np.bool_)
            if nul is not None:
                nulls[lay.null_slot[fi]] = nul
            if f.type in VAR_TYPES:
                if not isinstance(col, VarColumn):
                    col = VarColumn.from_values(list(col), utf8=f.type == "string")
                if len(col) != n:
                    raise ValueError(f"column '{f.name}' has {len(col)} values, expected {n}")
                if f.type == "fixed":
                    check_sizes(f, col, nul)
                if f.type in COLLECTIONS:
                    self._check_collection(fi, f, col, nul)
                var_cols.append(col)
                continue
            col = np.asarray(col)
            if nul is not None and col.shape == (n,):  # values under nulls need not be in range
                col = np.where(nul, np.zeros(1, col.dtype), col)
            vals[fi] = fixed_bits(f, col, n)
        lens = lay.rows(lay.var_slot, n, np.int64)
        base, datas = 0, []
        for slot, (fi, col) in enumerate(zip(np.flatnonzero(lay.var_slot >= 0), var_cols,
                                             strict=True)):  # fmt: skip
            vals[fi] = col.offsets[:-1] + (base - int(col.offsets[0]))
            lens[slot] = np.diff(col.offsets)
            datas.append(col.data[col.offsets[0] : col.offsets[-1]])
            base += int(col.offsets[-1] - col.offsets[0])
        var_data = datas[0] if len(datas) == 1 else np.concatenate([np.zeros(0, np.uint8), *datas])
        fixed = sum(K.MAX_FIXED_SIZE.get(int(t), 10) for t in lay.types)
        fixed += int((lay.null_branch >= 0).sum())
        out = np.empty(n * (len(self.header) + fixed) + base, np.uint8)
        header = np.frombuffer(self.header, np.uint8)
        if lay.general:
            nullable = (lay.null_branch, lay.null_slot)
            offsets = K.encode_bodies_general(header, lay.types, lay.var_slot, *nullable, vals,
                                              var_data, lens, nulls, out)  # fmt: skip
        else:
            offsets = K.encode_bodies(header, lay.types, lay.var_slot, vals, var_data, lens, out)
        return out[: offsets[n]], offsets

    def _check_collection(self, fi: int, f: FlatField, col: VarColumn, nul) -> None:
        """Every value of an array or map column must be one whole Avro encoding of its type."""
        skip = np.zeros(len(col), np.bool_) if nul is None else nul
        bad = C.check_slices(col.data, col.offsets, skip, self._lay.enum_n[fi], *self._lay.nodes,
                             self.limits.max_collection_items, *self._stack())  # fmt: skip
        if bad >= 0:
            raise ValueError(
                f"column '{f.name}' value {bad} is not the Avro encoding of a {f.type} of its type"
            )

    @staticmethod
    def _nulls(f: FlatField, columns: Mapping[str, Column], n: int) -> np.ndarray | None:
        """Field ``f``'s null column, checked; None when there is none."""
        nul = columns.get(null_column(f.name))
        if nul is None:
            return None
        nul = np.asarray(nul)
        if nul.shape != (n,) or nul.dtype != np.bool_:
            raise ValueError(f"null column '{null_column(f.name)}' must be {n} booleans")
        if not f.nullable and nul.any():
            raise ValueError(
                f"field '{f.name}' is not nullable but '{null_column(f.name)}' has nulls"
            )
        return nul if f.nullable else None

    def _zero_columns(self, n: int) -> dict[str, Column]:
        """n records whose every field is zero and not null, as columns."""
        cols: dict[str, Column] = {}
        for f in self.fields:
            cols[f.name] = zeros(f, n)
            if f.nullable:
                cols[null_column(f.name)] = np.zeros(n, np.bool_)
        return cols

    def warm_up(self) -> dict[str, Column]:
        """Encode and decode one zero-valued record, and return its columns.

        The first numba kernel a process runs costs ~0.1 s (numba starts up and loads its
        cache); a worker calls this before consuming so that the first batch's measured time,
        which feeds the scheduler's per-tuple costs, is the batch's own.
        """
        columns = self._encoder._zero_columns(1)
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
        if self._encoder is not self:
            return self._encoder.encode_one(record)
        if self.registry is not None:
            return self.registry.encode(self.schema, record)
        return encode_single_object(self.schema, record)
