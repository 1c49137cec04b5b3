"""Batch envelopes: one columnar :class:`Batch` per Kafka message on internal topics.

Internal topics pay Kafka's and Faust's per-message cost once per batch, so the envelope must be
cheap to build and to open. The layout is a small header plus raw little-endian column buffers,
each 8-byte aligned, so that decoding is a handful of ``np.frombuffer`` views over the message
(no copy) and encoding is a single join. It was chosen by measurement against Arrow IPC, Avro
and pickle (``processors/bench/envelope_codecs.py``); the byte layout is specified in
``docs/envelope-encoding.md``, which is the contract for readers in other languages.

Decoding never trusts the message: every length is checked against the bytes present, and
offsets, booleans and signs are validated, because a bad offset would make a numba kernel read
out of bounds. Anything wrong raises :class:`EnvelopeError` with the reason, which the runtime
forwards to the dead-letter topic.
"""

from __future__ import annotations

import struct
import sys

import numba as nb
import numpy as np

from processors.core.batch import Batch, Column, VarColumn

MAGIC = b"SMBE"
VERSION = 1

_HEADER = struct.Struct("<4sBBHII")  # magic, version, flags, n_columns, n_tuples, schema_len
_FLAG_KEY = 0x01
_FLAG_KEY_UTF8 = 0x02
_KNOWN_FLAGS = _FLAG_KEY | _FLAG_KEY_UTF8

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_COL = struct.Struct("<BH")  # type code, name length

UTF8 = 16
BINARY = 17
# type code -> little-endian dtype of the fixed-width column buffer
FIXED_TYPES: dict[int, np.dtype] = {
    1: np.dtype("?"),
    2: np.dtype("<i1"),
    3: np.dtype("<i2"),
    4: np.dtype("<i4"),
    5: np.dtype("<i8"),
    6: np.dtype("<u1"),
    7: np.dtype("<f4"),
    8: np.dtype("<f8"),
}
_CODE_BY_KIND = {(dt.kind, dt.itemsize): code for code, dt in FIXED_TYPES.items()}
_I8 = np.dtype("<i8")
_U8 = np.dtype(np.uint8)
_SIGN = np.dtype("<i1")
_LITTLE = sys.byteorder == "little"
_PAD = bytes(8)


class EnvelopeError(ValueError):
    """A batch cannot be encoded, or a message is not a valid envelope (the reason says why)."""


def _fixed_code(name: str, arr: np.ndarray) -> int:
    code = _CODE_BY_KIND.get((arr.dtype.kind, arr.dtype.itemsize))
    if code is None or arr.ndim != 1:
        raise EnvelopeError(
            f"column {name!r}: unsupported array (dtype {arr.dtype}, ndim {arr.ndim}); "
            "envelopes carry 1-d bool, int8/16/32/64, uint8, float32/64 or VarColumn"
        )
    return code


def _var_buffers(name: str, col: VarColumn) -> tuple[np.ndarray, np.ndarray]:
    """Offsets rebased to start at 0 and exactly the bytes they cover."""
    offsets = np.ascontiguousarray(col.offsets, dtype=_I8)
    if len(offsets) == 0:
        raise EnvelopeError(f"column {name!r}: VarColumn offsets are empty (need n + 1 entries)")
    start, end = int(offsets[0]), int(offsets[-1])
    if start != 0:
        offsets = offsets - start
    data = np.ascontiguousarray(col.data, dtype=np.uint8)
    if start < 0 or end > len(data):
        raise EnvelopeError(f"column {name!r}: offsets {start}..{end} outside {len(data)} bytes")
    return offsets, data[start:end]


def _name_bytes(what: str, text: str, limit: int) -> bytes:
    raw = text.encode("utf-8")
    if len(raw) > limit:
        raise EnvelopeError(f"{what} {text[:40]!r}... is longer than {limit} bytes")
    return raw


def encode_batch(batch: Batch) -> bytes:
    """The envelope of ``batch`` (layout version 1): one copy of every buffer, nothing more."""
    n = len(batch)
    if n >= 1 << 32:
        raise EnvelopeError(f"batch of {n} tuples exceeds the envelope limit of 2**32 - 1")
    if len(batch.columns) > 0xFFFF:
        raise EnvelopeError(f"batch has {len(batch.columns)} columns, the limit is 65535")
    schema: list[bytes] = []
    buffers: list[np.ndarray] = [
        np.ascontiguousarray(batch.sign, dtype="<i1"),
        np.ascontiguousarray(batch.ts, dtype=_I8),
    ]
    flags = 0
    if batch.key is not None:
        flags |= _FLAG_KEY | (_FLAG_KEY_UTF8 if batch.key.utf8 else 0)
        buffers.extend(_var_buffers("<key>", batch.key))
    for name, col in batch.columns.items():
        if isinstance(col, VarColumn):
            code = UTF8 if col.utf8 else BINARY
            buffers.extend(_var_buffers(name, col))
        else:
            arr = np.asarray(col)
            code = _fixed_code(name, arr)
            buffers.append(np.ascontiguousarray(arr, dtype=FIXED_TYPES[code]))
        raw = _name_bytes("column name", name, 0xFFFF)
        schema.append(_COL.pack(code, len(raw)) + raw)
    if len(batch.meta) > 0xFFFF:
        raise EnvelopeError(f"batch meta has {len(batch.meta)} entries, the limit is 65535")
    schema.append(_U16.pack(len(batch.meta)))
    for k, v in batch.meta.items():
        kb = _name_bytes("meta key", str(k), 0xFFFF)
        vb = _name_bytes("meta value", str(v), 0xFFFFFFFF)
        schema.append(_U16.pack(len(kb)) + kb + _U32.pack(len(vb)) + vb)
    schema_bytes = b"".join(schema)
    if len(schema_bytes) > 0xFFFFFFFF:
        raise EnvelopeError("column names and meta exceed the 4 GiB schema section")
    parts: list[bytes | memoryview] = [
        _HEADER.pack(MAGIC, VERSION, flags, len(batch.columns), n, len(schema_bytes)),
        schema_bytes,
    ]
    pos = _HEADER.size + len(schema_bytes)
    for arr in buffers:
        if pad := -pos % 8:
            parts.append(_PAD[:pad])
            pos += pad
        if arr.nbytes:
            parts.append(memoryview(arr).cast("B"))
            pos += arr.nbytes
    return b"".join(parts)


@nb.njit(cache=True, nogil=True)
def _var_problem(offsets: np.ndarray, data: np.ndarray, utf8: bool) -> int:
    """0 if offsets are 0-based, non-decreasing and within ``data`` and, for UTF-8, no value
    starts on a continuation byte; 1 for bad offsets, 2 for a split character."""
    if offsets[0] != 0:
        return 1
    end = len(data)
    for i in range(len(offsets) - 1):
        a = offsets[i]
        b = offsets[i + 1]
        if b < a or b > end:
            return 1
        if utf8 and a < b and (data[a] & 0xC0) == 0x80:
            return 2
    return 0


@nb.njit(cache=True, nogil=True)
def _first_outside(values: np.ndarray, lo: int, hi: int, skip: int) -> int:
    """Index of the first value outside ``lo..hi`` or equal to ``skip``, else -1."""
    for i in range(len(values)):
        v = values[i]
        if v < lo or v > hi or v == skip:
            return i
    return -1


class _Reader:
    """Bounds-checked cursor over the schema section; every failure is an EnvelopeError."""

    __slots__ = ("buf", "pos", "size")

    def __init__(self, buf: memoryview, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos
        self.size = len(buf)

    def take(self, nbytes: int, what: str) -> int:
        """Start of the next ``nbytes`` bytes, advancing past them."""
        if nbytes < 0 or self.pos + nbytes > self.size:
            raise EnvelopeError(
                f"truncated schema section: {what} needs {nbytes} bytes at offset {self.pos}, "
                f"the section ends at {self.size}"
            )
        start = self.pos
        self.pos += nbytes
        return start

    def unpack(self, st: struct.Struct, what: str) -> tuple:
        return st.unpack_from(self.buf, self.take(st.size, what))

    def text(self, nbytes: int, what: str) -> str:
        start = self.take(nbytes, what)
        try:
            return str(self.buf[start : start + nbytes], "utf-8")
        except UnicodeDecodeError as exc:
            raise EnvelopeError(f"{what} is not valid UTF-8: {exc.reason}") from None


def _view(buf: memoryview, pos: int, dtype: np.dtype, count: int, what: str) -> tuple:
    """``count`` values at the first 8-byte boundary from ``pos``, viewed in place; and the end."""
    pos += -pos % 8
    end = pos + count * dtype.itemsize
    if end > len(buf):
        raise EnvelopeError(
            f"truncated envelope: {what} needs bytes {pos}..{end}, message has {len(buf)}"
        )
    arr = np.frombuffer(buf, dtype, count, pos)
    if not _LITTLE and dtype.itemsize > 1:
        arr = arr.astype(dtype.newbyteorder("="))
    return arr, end


def _var(buf: memoryview, pos: int, n: int, utf8: bool, what: str) -> tuple[VarColumn, int]:
    """A validated VarColumn (offsets buffer, then data buffer) and the end of its bytes."""
    offsets, pos = _view(buf, pos, _I8, n + 1, what)
    nbytes = int(offsets[-1])
    if nbytes < 0:
        raise EnvelopeError(f"{what}: negative data length {nbytes}")
    data, pos = _view(buf, pos, _U8, nbytes, what)
    problem = _var_problem(offsets, data, utf8)
    if problem == 1:
        raise EnvelopeError(f"{what}: offsets must start at 0, never decrease, end at the data")
    if utf8 and (problem == 2 or not _is_utf8(data)):
        raise EnvelopeError(f"{what}: values are not valid UTF-8")
    return VarColumn(offsets, data, utf8), pos


def _is_utf8(data: np.ndarray) -> bool:
    try:
        str(memoryview(data), "utf-8")
    except UnicodeDecodeError:
        return False
    return True


# per column (type code, name, fixed dtype or None, label for errors); meta
Layout = tuple[tuple[tuple[int, str, np.dtype | None, str], ...], dict[str, str]]
_layouts: dict[tuple[int, bytes], Layout] = {}
_MAX_LAYOUTS = 1024


def _parse_schema(r: _Reader, n_cols: int, end: int) -> Layout:
    """Column descriptors and meta from the schema section."""
    cols: list[tuple[int, str, np.dtype | None, str]] = []
    for i in range(n_cols):
        code, name_len = r.unpack(_COL, f"column {i} descriptor")
        name = r.text(name_len, f"column {i} name")
        if code not in FIXED_TYPES and code not in (UTF8, BINARY):
            raise EnvelopeError(f"column {name!r}: unknown type code {code}")
        cols.append((code, name, FIXED_TYPES.get(code), f"column {name!r}"))
    (n_meta,) = r.unpack(_U16, "meta count")
    meta: dict[str, str] = {}
    for i in range(n_meta):
        (klen,) = r.unpack(_U16, f"meta entry {i} key length")
        k = r.text(klen, f"meta entry {i} key")
        (vlen,) = r.unpack(_U32, f"meta entry {i} value length")
        meta[k] = r.text(vlen, f"meta entry {k!r} value")
    if r.pos != end:
        raise EnvelopeError(f"schema section ends at byte {end} but its entries end at {r.pos}")
    if len(meta) != n_meta or len({col[1] for col in cols}) != n_cols:
        raise EnvelopeError("duplicate column name or meta key")
    return tuple(cols), meta


def decode_batch(data: bytes | bytearray | memoryview) -> Batch:
    """The batch in an envelope; arrays are views of ``data`` (read-only when it is ``bytes``)."""
    try:
        buf = memoryview(data).cast("B")
    except (TypeError, ValueError) as exc:
        raise EnvelopeError(f"envelope must be a contiguous bytes-like object: {exc}") from None
    if len(buf) < _HEADER.size:
        raise EnvelopeError(f"truncated envelope: {len(buf)} bytes, the header alone is 16")
    magic, version, flags, n_cols, n, schema_len = _HEADER.unpack_from(buf)
    if magic != MAGIC:
        raise EnvelopeError(f"bad magic {bytes(magic)!r}, expected {MAGIC!r}: not a batch envelope")
    if version != VERSION:
        raise EnvelopeError(f"unsupported envelope version {version} (this reader knows {VERSION})")
    if flags & ~_KNOWN_FLAGS:
        raise EnvelopeError(f"unknown envelope flags 0x{flags:02x}")
    end = _HEADER.size + schema_len
    if end > len(buf):
        raise EnvelopeError(f"truncated envelope: schema section ends at {end}, of {len(buf)}")
    # A topic repeats one schema section, so parse each distinct one once.
    cache_key = (n_cols, bytes(buf[_HEADER.size : end]))
    layout = _layouts.get(cache_key)
    if layout is None:
        layout = _parse_schema(_Reader(buf[:end], _HEADER.size), n_cols, end)
        if len(_layouts) >= _MAX_LAYOUTS:
            _layouts.clear()
        _layouts[cache_key] = layout
    cols, meta = layout

    sign, pos = _view(buf, end, _SIGN, n, "sign")
    if (bad := _first_outside(sign, -1, 1, 0)) >= 0:
        raise EnvelopeError(f"sign of tuple {bad} is {sign[bad]}, not +1 or -1")
    ts, pos = _view(buf, pos, _I8, n, "ts")
    key = None
    if flags & _FLAG_KEY:
        key, pos = _var(buf, pos, n, bool(flags & _FLAG_KEY_UTF8), "key")
    columns: dict[str, Column] = {}
    for code, name, dtype, label in cols:
        if dtype is None:
            columns[name], pos = _var(buf, pos, n, code == UTF8, label)
            continue
        arr, pos = _view(buf, pos, dtype, n, label)
        if code == 1 and (bad := _first_outside(arr.view(np.uint8), 0, 1, 2)) >= 0:
            raise EnvelopeError(f"{label}: boolean byte of tuple {bad} is not 0 or 1")
        columns[name] = arr
    if pos != len(buf):
        raise EnvelopeError(f"{len(buf) - pos} trailing bytes after the last buffer")
    return Batch(columns, sign, ts, key, dict(meta))


#: Largest envelope streamon writes: well under Kafka's default 1 MiB message limit.
MAX_ENVELOPE_BYTES = 512 * 1024


def envelope_slices(batch: Batch, max_bytes: int = MAX_ENVELOPE_BYTES) -> list[Batch]:
    """``batch`` cut into row ranges (in order) of at most about ``max_bytes`` each: the
    envelopes ``encode_envelopes`` writes, for a sender that labels each one."""
    n = len(batch)
    if n <= 1 or batch.nbytes() <= max_bytes:
        return [batch]
    ends = np.cumsum(batch.row_nbytes())
    pieces, start, base = [], 0, 0
    while start < n:
        # last row that keeps this envelope within max_bytes (at least one row)
        stop = max(start + 1, int(np.searchsorted(ends, base + max_bytes, side="right")))
        pieces.append(batch.slice(start, stop))
        base, start = int(ends[stop - 1]), stop
    return pieces


def encode_envelopes(batch: Batch, max_bytes: int = MAX_ENVELOPE_BYTES) -> list[bytes]:
    """``batch`` as envelopes of at most about ``max_bytes`` each (row ranges, in order)."""
    return [encode_batch(piece) for piece in envelope_slices(batch, max_bytes)]
