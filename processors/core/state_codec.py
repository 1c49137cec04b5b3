"""The byte format of stage snapshots: a state tree as JSON plus raw array buffers, never pickle.

Snapshots travel through the query's state topic, which any client with write access can fill.
Decoding must therefore never run code: this format holds only data. Layout (all integers
little-endian)::

    b"SMS1"                magic and format version
    u32  header length H
    H bytes                UTF-8 JSON: the tree, with each numpy array replaced by
                           {"__array__": i, "dtype": "<i8", "shape": [n, ...]}
    per array i, in order: u64 length L, then L raw bytes (C order)

A *state tree* is nested dicts (str keys) and lists of str, bytes, int, float, bool, None and
numpy arrays of a numeric or bool dtype (bytes are stored like a uint8 array, with the dtype
``"bytes"``; tuples come back as lists). Decoding checks every length, dtype and shape against the
bytes present and raises :class:`SnapshotError` naming what is wrong.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import numpy as np

MAGIC = b"SMS1"
#: snapshots made one after another (processors.physical.joined): the same framing, a JSON
#: header that does not describe the parts, then each part as an array is (u64 length, bytes)
PARTS_MAGIC = b"SMP1"
_ARRAY = "__array__"
#: dtype kinds an array may have: bool, signed and unsigned ints, floats (no objects)
_KINDS = frozenset("biuf")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class SnapshotError(ValueError):
    """A snapshot that cannot be decoded or does not fit the stage that loads it."""


def encode_state(tree: dict[str, Any]) -> bytearray:
    """``tree`` as snapshot bytes (arrays are copied out, so later changes cannot leak in), in
    one buffer, each array copied into it once: a large state is not held twice over while it
    is saved (nested snapshots, a chain's stages, are copied in without a copy of their own)."""
    arrays: list[np.ndarray] = []
    header = json.dumps(_strip(tree, arrays, "$"), separators=(",", ":"), allow_nan=True)
    raw = header.encode()
    total = 8 + len(raw) + sum(8 + a.nbytes for a in arrays)
    out = bytearray(total)
    out[:4] = MAGIC
    _U32.pack_into(out, 4, len(raw))
    out[8 : 8 + len(raw)] = raw
    at = 8 + len(raw)
    for array in arrays:
        _U64.pack_into(out, at, array.nbytes)
        at += 8
        if array.nbytes:
            flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
            out[at : at + array.nbytes] = memoryview(flat)
        at += array.nbytes
    return out


def decode_state(data: bytes | bytearray | memoryview) -> dict[str, Any]:
    """The state tree of snapshot bytes; :class:`SnapshotError` if they are not one."""
    view = memoryview(data)
    if bytes(view[:4]) != MAGIC:
        head = bytes(view[:4])
        raise SnapshotError(f"not a streamon snapshot (starts with {head!r}, not {MAGIC!r})")
    if len(view) < 8:
        raise SnapshotError(f"snapshot of {len(view)} bytes is cut off before its header")
    (size,) = _U32.unpack_from(view, 4)
    if 8 + size > len(view):
        raise SnapshotError(f"snapshot header of {size} bytes is cut off at {len(view)} bytes")
    try:
        tree = json.loads(bytes(view[8 : 8 + size]))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SnapshotError(f"snapshot header is not JSON: {exc}") from exc
    buffers: list[memoryview] = []
    at = 8 + size
    while at < len(view):
        if at + 8 > len(view):
            raise SnapshotError(f"snapshot array {len(buffers)} length cut off at byte {at}")
        (length,) = _U64.unpack_from(view, at)
        at += 8
        if at + length > len(view):
            raise SnapshotError(
                f"snapshot array {len(buffers)} needs {length} bytes, {len(view) - at} left"
            )
        buffers.append(view[at : at + length])
        at += length
    if not isinstance(tree, dict):
        raise SnapshotError("snapshot header is not an object")
    used: set[int] = set()
    out = _restore(tree, buffers, used, "$")
    if len(used) != len(buffers):
        raise SnapshotError(f"snapshot has {len(buffers) - len(used)} arrays no field refers to")
    return out


def part_starts(data: bytes | memoryview, base: int = 0, depth: int = 0) -> list[int]:
    """Where the parts of snapshot bytes begin (the arrays' length fields and data, also
    inside snapshots nested as bytes, as a stage chain's are): a chunker that cuts there keeps
    an array that grows from changing its neighbours' chunks. Only a hint: bytes that are not
    a snapshot, or stop being one, give the starts found so far, never an error."""
    view = memoryview(data)
    if bytes(view[:4]) not in (MAGIC, PARTS_MAGIC) or len(view) < 8 or depth > 4:
        return []
    at = 8 + _U32.unpack_from(view, 4)[0]
    starts = [base + at]
    while at + 8 <= len(view):
        (length,) = _U64.unpack_from(view, at)
        if at + 8 + length > len(view):
            break
        starts += [base + at, base + at + 8]
        starts += part_starts(view[at + 8 : at + 8 + length], base + at + 8, depth + 1)
        at += 8 + length
    return starts


def _strip(node: Any, arrays: list[np.ndarray], path: str) -> Any:
    if isinstance(node, np.ndarray):
        if node.dtype.kind not in _KINDS:
            raise TypeError(f"{path}: arrays of dtype {node.dtype} cannot be snapshotted")
        arrays.append(node)
        return {_ARRAY: len(arrays) - 1, "dtype": node.dtype.str, "shape": list(node.shape)}
    if isinstance(node, dict):
        if _ARRAY in node:
            raise TypeError(f"{path}: the key {_ARRAY!r} is reserved")
        out = {}
        for key, value in node.items():
            if not isinstance(key, str):
                raise TypeError(f"{path}: key {key!r} is not a string")
            out[key] = _strip(value, arrays, f"{path}.{key}")
        return out
    if isinstance(node, list | tuple):
        return [_strip(v, arrays, f"{path}[{i}]") for i, v in enumerate(node)]
    if isinstance(node, bytes | bytearray):
        arrays.append(np.frombuffer(node, np.uint8))  # a view: copied once, into the output
        return {_ARRAY: len(arrays) - 1, "dtype": "bytes", "shape": [len(node)]}
    if isinstance(node, np.generic):
        return node.item()
    if node is None or isinstance(node, str | bool | int | float):
        return node
    raise TypeError(f"{path}: {type(node).__name__} values cannot be snapshotted")


def _restore(node: Any, buffers: list[memoryview], used: set[int], path: str) -> Any:
    if isinstance(node, dict):
        if _ARRAY in node:
            return _array(node, buffers, used, path)
        return {k: _restore(v, buffers, used, f"{path}.{k}") for k, v in node.items()}
    if isinstance(node, list):
        return [_restore(v, buffers, used, f"{path}[{i}]") for i, v in enumerate(node)]
    return node


def _array(node: dict[str, Any], buffers: list[memoryview], used: set[int], path: str) -> Any:
    index, dtype_str, shape = node.get(_ARRAY), node.get("dtype"), node.get("shape")
    if not isinstance(index, int) or not 0 <= index < len(buffers) or index in used:
        raise SnapshotError(f"{path}: bad array reference {index!r}")
    try:
        dtype = np.dtype("u1" if dtype_str == "bytes" else str(dtype_str))
    except (TypeError, ValueError) as exc:
        raise SnapshotError(f"{path}: unknown dtype {dtype_str!r}") from exc
    if dtype.kind not in _KINDS or dtype.hasobject:
        raise SnapshotError(f"{path}: dtype {dtype_str!r} is not allowed in a snapshot")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise SnapshotError(f"{path}: bad shape {shape!r}")
    buffer = buffers[index]
    if dtype_str == "bytes":  # a bytes value, stored as its own buffer
        used.add(index)
        return bytes(buffer)
    if math.prod(shape) * dtype.itemsize != len(buffer):
        raise SnapshotError(
            f"{path}: shape {shape} of {dtype} needs {math.prod(shape) * dtype.itemsize} bytes,"
            f" the snapshot has {len(buffer)}"
        )
    used.add(index)
    return np.frombuffer(buffer, dtype=dtype).reshape(shape).copy()


def expect(tree: dict[str, Any], kind: str, version: int, what: str) -> None:
    """Check a decoded tree is a ``kind`` snapshot of ``version``, naming ``what`` if not."""
    if tree.get("kind") != kind:
        raise SnapshotError(f"{what}: snapshot of a {tree.get('kind')!r} stage, not {kind!r}")
    if tree.get("version") != version:
        raise SnapshotError(
            f"{what}: unknown {kind} snapshot version {tree.get('version')!r} (reads {version})"
        )
