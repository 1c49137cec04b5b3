"""numba kernels: Avro binary bodies of a flat record <-> columns, many records per call.

A flat record layout is an int8 type code per leaf field (nested records are their leaves in
order, which is how Avro writes them), plus per field the union branch of "null" for
``["null", T]`` fields (-1 for the others) and the symbol count (enum) or size (fixed).
Decoding writes every field of record i into ``vals[f, i]`` (int64: ints as values,
floats/doubles as their IEEE bit patterns, booleans as 0/1, enums as indices, strings, bytes and
fixed as the absolute start of their bytes in ``buf``, with the length in
``lens[var_slot[f], i]``), and whether a nullable field is null into ``nulls[null_slot[f], i]``
(its value then reads as zero: 0, an empty string, ``size`` zero bytes for fixed, whose start is
then -1); numpy then turns rows into typed columns without copying per record. Garbage never
raises or reads out of bounds: each record gets a status code, the position and the field where
decoding stopped.
"""

import numba as nb
import numpy as np

from topics.avro_collections import skip_value, utf8_ok, varint

# field type codes
# (ordered so that kernels test ranges: varint types T_INT..T_LONG, IEEE types, var-length types)
# arrays and maps are kept as their encoding, like fixed (no length prefix; see avro_collections)
T_BOOLEAN, T_INT, T_ENUM, T_LONG, T_FLOAT, T_DOUBLE, T_STRING, T_BYTES, T_FIXED, T_ARRAY, T_MAP = (
    range(11))  # fmt: skip
TYPE_CODES = {
    "boolean": T_BOOLEAN,
    "int": T_INT,
    "long": T_LONG,
    "float": T_FLOAT,
    "double": T_DOUBLE,
    "string": T_STRING,
    "bytes": T_BYTES,
    "enum": T_ENUM,
    "fixed": T_FIXED,
    "array": T_ARRAY,
    "map": T_MAP,
}
# largest encoded size of a fixed-size field (varints: 5 bytes for int, 10 for long)
# (fixed: its bytes are counted with the string and bytes data; a nullable field adds one byte)
MAX_FIXED_SIZE = {
    T_BOOLEAN: 1,
    T_INT: 5,
    T_LONG: 10,
    T_FLOAT: 4,
    T_DOUBLE: 8,
    T_ENUM: 5,
    T_FIXED: 0,
    T_ARRAY: 0,
    T_MAP: 0,
}

# per-record status codes
OK = 0
TRUNCATED = 1
VARINT_OVERFLOW = 2
NEGATIVE_LENGTH = 3
LENGTH_PAST_END = 4
TRAILING_BYTES = 5
ENUM_OUT_OF_RANGE = 6
BAD_BOOLEAN = 7
BAD_UTF8 = 8
SHORT_HEADER = 9
BAD_MARKER = 10
BAD_UNION = 11

# header framings
FRAMING_SINGLE_OBJECT = 0
FRAMING_CONFLUENT = 1

_LOW63 = 0x7FFFFFFFFFFFFFFF
_LOW57 = 0x01FFFFFFFFFFFFFF


@nb.njit(cache=True, nogil=True)
def parse_headers(buf, offsets, framing):
    """Check each message's header; returns (status int8, key int64, body start int64).

    key is the fingerprint bits (single-object, little-endian) or the schema id (Confluent).
    """
    n = len(offsets) - 1
    status = np.zeros(n, np.int8)
    key = np.zeros(n, np.int64)
    body = np.zeros(n, np.int64)
    for i in range(n):
        s = offsets[i]
        size = offsets[i + 1] - s
        if framing == FRAMING_SINGLE_OBJECT:
            if size < 2:
                status[i] = SHORT_HEADER
            elif buf[s] != 0xC3 or buf[s + 1] != 0x01:
                status[i] = BAD_MARKER
            elif size < 10:
                status[i] = SHORT_HEADER
            else:
                v = np.int64(0)
                for k in range(8):
                    v |= np.int64(buf[s + 2 + k]) << (8 * k)
                key[i] = v
                body[i] = s + 10
        else:
            if size < 1:
                status[i] = SHORT_HEADER
            elif buf[s] != 0:
                status[i] = BAD_MARKER
            elif size < 5:
                status[i] = SHORT_HEADER
            else:
                v = np.int64(0)
                for k in range(4):
                    v = (v << 8) | np.int64(buf[s + 1 + k])
                key[i] = v
                body[i] = s + 5
    return status, key, body


@nb.njit(cache=True, nogil=True)
def decode_bodies(
    buf, starts, ends, types, enum_n, check_utf8, var_slot, vals, lens, status, err_pos, err_field
):
    """Decode record i from ``buf[starts[i]:ends[i]]`` into ``vals[:, i]`` / ``lens[:, i]``."""
    n = len(starts)
    nf = len(types)
    for i in range(n):
        pos = starts[i]
        end = ends[i]
        st = OK
        f = 0
        fstart = pos
        while f < nf:
            t = types[f]
            fstart = pos
            if t == T_BOOLEAN:
                if pos >= end:
                    st = TRUNCATED
                    break
                b = buf[pos]
                if b > 1:
                    st = BAD_BOOLEAN
                    break
                vals[f, i] = b
                pos += 1
            elif T_FLOAT <= t <= T_DOUBLE:
                width = 4 if t == T_FLOAT else 8
                if end - pos < width:
                    st = TRUNCATED
                    break
                v = np.int64(0)
                for k in range(width):
                    v |= np.int64(buf[pos + k]) << (8 * k)
                vals[f, i] = v
                pos += width
            else:
                # zigzag varint: int and enum take at most 5 bytes, long and lengths 10
                last = 4 if t <= T_ENUM else 9
                last_max = 0x0F if last == 4 else 0x01
                acc = np.int64(0)
                k = 0
                while True:
                    if pos >= end:
                        st = TRUNCATED
                        break
                    b = buf[pos]
                    pos += 1
                    if k == last and b > last_max:
                        st = VARINT_OVERFLOW
                        break
                    acc |= np.int64(b & 0x7F) << (7 * k)
                    if b < 0x80:
                        break
                    k += 1
                if st != OK:
                    break
                v = ((acc >> 1) & _LOW63) ^ -(acc & 1)
                if t >= T_STRING:
                    if v < 0:
                        st = NEGATIVE_LENGTH
                        break
                    if v > end - pos:
                        st = LENGTH_PAST_END
                        break
                    if check_utf8[f] and not utf8_ok(buf, pos, pos + v):
                        st = BAD_UTF8
                        break
                    vals[f, i] = pos
                    lens[var_slot[f], i] = v
                    pos += v
                else:
                    if t == T_ENUM and (v < 0 or v >= enum_n[f]):
                        st = ENUM_OUT_OF_RANGE
                        break
                    vals[f, i] = v
            f += 1
        if st == OK and pos != end:
            st = TRAILING_BYTES
            fstart = pos
            f = -1
        status[i] = st
        if st != OK:
            err_pos[i] = fstart
            err_field[i] = f


@nb.njit(cache=True, nogil=True)
def decode_bodies_general(
    buf,
    starts,
    ends,
    types,
    enum_n,
    check_utf8,
    var_slot,
    null_branch,
    null_slot,
    vals,
    lens,
    nulls,
    status,
    err_pos,
    err_field,
    nodes,
    max_items,
    stack,
):
    """Decode record i from ``buf[starts[i]:ends[i]]`` into ``vals[:, i]`` / ``lens[:, i]``, for
    layouts with nullable, fixed, array or map fields (:func:`decode_bodies` keeps the others
    fast). An array or map field's root node in ``nodes`` (kind, a, b, kids) is ``enum_n[f]``."""
    n = len(starts)
    nf = len(types)
    kind, na, nb_, kids = nodes
    snode, sstate = stack
    for i in range(n):
        pos = starts[i]
        end = ends[i]
        st = OK
        f = 0
        fstart = pos
        items = np.int64(0)
        while f < nf:
            t = types[f]
            fstart = pos
            nbr = null_branch[f]
            if nbr >= 0:
                branch, pos, st = varint(buf, pos, end, 9)
                if st != OK:
                    break
                if branch == nbr:
                    nulls[null_slot[f], i] = True
                    if t >= T_STRING:
                        vals[f, i] = -1
                        lens[var_slot[f], i] = enum_n[f] if t == T_FIXED else 0
                    else:
                        vals[f, i] = 0
                    f += 1
                    continue
                if branch != 1 - nbr:
                    st = BAD_UNION
                    break
                nulls[null_slot[f], i] = False
            if t == T_BOOLEAN:
                if pos >= end:
                    st = TRUNCATED
                    break
                b = buf[pos]
                if b > 1:
                    st = BAD_BOOLEAN
                    break
                vals[f, i] = b
                pos += 1
            elif T_FLOAT <= t <= T_DOUBLE:
                width = 4 if t == T_FLOAT else 8
                if end - pos < width:
                    st = TRUNCATED
                    break
                v = np.int64(0)
                for k in range(width):
                    v |= np.int64(buf[pos + k]) << (8 * k)
                vals[f, i] = v
                pos += width
            elif t == T_FIXED:
                if end - pos < enum_n[f]:
                    st = TRUNCATED
                    break
                vals[f, i] = pos
                lens[var_slot[f], i] = enum_n[f]
                pos += enum_n[f]
            elif t >= T_ARRAY:
                vals[f, i] = pos
                pos, st, got = skip_value(buf, pos, end, enum_n[f], kind, na, nb_, kids,
                                          max_items - items, snode, sstate)  # fmt: skip
                if st != OK:
                    break
                items += got
                lens[var_slot[f], i] = pos - vals[f, i]
            else:
                v, pos, st = varint(buf, pos, end, 4 if t <= T_ENUM else 9)
                if st != OK:
                    break
                if t >= T_STRING:
                    if v < 0:
                        st = NEGATIVE_LENGTH
                        break
                    if v > end - pos:
                        st = LENGTH_PAST_END
                        break
                    if check_utf8[f] and not utf8_ok(buf, pos, pos + v):
                        st = BAD_UTF8
                        break
                    vals[f, i] = pos
                    lens[var_slot[f], i] = v
                    pos += v
                else:
                    if t == T_ENUM and (v < 0 or v >= enum_n[f]):
                        st = ENUM_OUT_OF_RANGE
                        break
                    vals[f, i] = v
            f += 1
        if st == OK and pos != end:
            st = TRAILING_BYTES
            fstart = pos
            f = -1
        status[i] = st
        if st != OK:
            err_pos[i] = fstart
            err_field[i] = f


@nb.njit(cache=True, nogil=True)
def gather_slices(buf, starts, lens):
    """Concatenate ``buf[starts[j]:starts[j]+lens[j]]`` into an offsets/data pair (a start of
    -1 gives ``lens[j]`` zero bytes: a null fixed value)."""
    n = len(starts)
    offsets = np.empty(n + 1, np.int64)
    offsets[0] = 0
    for j in range(n):
        offsets[j + 1] = offsets[j] + lens[j]
    out = np.empty(offsets[n], np.uint8)
    for j in range(n):
        s = starts[j]
        d = offsets[j]
        if s < 0:
            for k in range(lens[j]):
                out[d + k] = 0
            continue
        for k in range(lens[j]):
            out[d + k] = buf[s + k]
    return offsets, out


@nb.njit(cache=True, nogil=True)
def encode_bodies(header, types, var_slot, vals, var_data, lens, out):
    """Write header + body of record i for every i into ``out``; returns offsets int64[n+1].

    ``out`` must hold the worst case (see :data:`MAX_FIXED_SIZE`); inputs follow the decode
    layout (strings as start into ``var_data`` plus ``lens``).
    """
    nf = len(types)
    n = vals.shape[1]
    hl = len(header)
    offsets = np.empty(n + 1, np.int64)
    offsets[0] = 0
    pos = 0
    for i in range(n):
        for k in range(hl):
            out[pos + k] = header[k]
        pos += hl
        for f in range(nf):
            t = types[f]
            v = vals[f, i]
            if t == T_BOOLEAN:
                out[pos] = 1 if v != 0 else 0
                pos += 1
            elif T_FLOAT <= t <= T_DOUBLE:
                width = 4 if t == T_FLOAT else 8
                for k in range(width):
                    out[pos + k] = (v >> (8 * k)) & 0xFF
                pos += width
            else:
                length = np.int64(0)
                if t >= T_STRING:
                    length = lens[var_slot[f], i]
                    z = length << 1
                else:
                    z = (v << 1) ^ (v >> 63)
                while z < 0 or z >= 0x80:
                    out[pos] = (z & 0x7F) | 0x80
                    z = (z >> 7) & _LOW57
                    pos += 1
                out[pos] = z
                pos += 1
                if t >= T_STRING:
                    for k in range(length):
                        out[pos + k] = var_data[v + k]
                    pos += length
        offsets[i + 1] = pos
    return offsets


@nb.njit(cache=True, nogil=True)
def encode_bodies_general(
    header, types, var_slot, null_branch, null_slot, vals, var_data, lens, nulls, out
):
    """Write header + body of record i for every i into ``out``; returns offsets int64[n+1].

    ``out`` must hold the worst case (see :data:`MAX_FIXED_SIZE`, plus a byte per nullable
    field); inputs follow the decode layout (strings and fixed as start into ``var_data`` plus
    ``lens``, which for fixed must be its size; ``nulls`` for the nullable fields).
    """
    nf = len(types)
    n = vals.shape[1]
    hl = len(header)
    offsets = np.empty(n + 1, np.int64)
    offsets[0] = 0
    pos = 0
    for i in range(n):
        for k in range(hl):
            out[pos + k] = header[k]
        pos += hl
        for f in range(nf):
            t = types[f]
            v = vals[f, i]
            nbr = null_branch[f]
            if nbr >= 0:
                if nulls[null_slot[f], i]:
                    out[pos] = 2 * nbr
                    pos += 1
                    continue
                out[pos] = 2 - 2 * nbr
                pos += 1
            if t == T_BOOLEAN:
                out[pos] = 1 if v != 0 else 0
                pos += 1
            elif T_FLOAT <= t <= T_DOUBLE:
                width = 4 if t == T_FLOAT else 8
                for k in range(width):
                    out[pos + k] = (v >> (8 * k)) & 0xFF
                pos += width
            elif t >= T_FIXED:  # fixed, or an array or map's encoding: verbatim
                length = lens[var_slot[f], i]
                for k in range(length):
                    out[pos + k] = var_data[v + k]
                pos += length
            else:
                length = np.int64(0)
                if t >= T_STRING:
                    length = lens[var_slot[f], i]
                    z = length << 1
                else:
                    z = (v << 1) ^ (v >> 63)
                while z < 0 or z >= 0x80:
                    out[pos] = (z & 0x7F) | 0x80
                    z = (z >> 7) & _LOW57
                    pos += 1
                out[pos] = z
                pos += 1
                if t >= T_STRING:
                    for k in range(length):
                        out[pos + k] = var_data[v + k]
                    pos += length
        offsets[i + 1] = pos
    return offsets
