"""Bounds on decoding one Avro record: size, collection items, nesting.

fastavro trusts the counts in the data: an array's block count of 2**62 in a 42-byte record
makes it loop (with the GIL held) for ever when the items take no bytes, or for very long when
they are skipped. :func:`check_bounds` walks a body against its writer schema before anything
decodes it, in time linear in the body's size, and refuses what no honest writer produces: a
block count greater than the bytes left after it (every item takes at least a byte, except
nulls, which are counted as if they did), more items in all than ``max_collection_items``,
nesting deeper than ``max_nesting``, a record over ``max_record_bytes``.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

_ENV = "STREAMON_DECODE_"


class DecodeBoundsError(ValueError):
    """A record exceeds a decode bound (or is not what its schema says): a bad record."""


@dataclass(frozen=True)
class DecodeLimits:
    """The bounds every record decode keeps; from the environment with :meth:`from_env`
    (``STREAMON_DECODE_MAX_RECORD_BYTES``, ``..._MAX_COLLECTION_ITEMS``, ``..._MAX_NESTING``)."""

    max_record_bytes: int = 8 * 1024 * 1024
    max_collection_items: int = 1_000_000
    max_nesting: int = 32

    @classmethod
    def from_env(cls, environ: Any = None, base: DecodeLimits | None = None) -> DecodeLimits:
        """``base`` (default: the defaults) with each bound its ``STREAMON_DECODE_*`` variable
        sets replaced."""
        env = os.environ if environ is None else environ
        values = {}
        for name in LIMIT_NAMES:
            raw = env.get(_ENV + name.upper())
            if raw is not None:
                try:
                    values[name] = int(raw)
                except ValueError as exc:
                    raise ValueError(f"{_ENV + name.upper()}={raw!r} is not an integer") from exc
                if values[name] <= 0:
                    raise ValueError(f"{_ENV + name.upper()} must be positive, not {raw}")
        return dataclasses.replace(base or cls(), **values)

    @classmethod
    def current(cls) -> DecodeLimits:
        """The process's bounds: those the configuration installed (:func:`install_limits`),
        else the environment's."""
        return _installed if _installed is not None else cls.from_env()


#: the bounds a config file may set (the ``[decode]`` table)
LIMIT_NAMES = ("max_record_bytes", "max_collection_items", "max_nesting")
_installed: DecodeLimits | None = None


def install_limits(limits: DecodeLimits) -> None:
    """Every codec of this process made from now on keeps ``limits``."""
    global _installed
    _installed = limits


_FIXED = {"null": 0, "boolean": 1, "float": 4, "double": 8}


def _named_types(schema: Any, namespace: str, out: dict[str, Any]) -> None:
    """Every named type defined in ``schema``, by full and short name."""
    if isinstance(schema, list):
        for branch in schema:
            _named_types(branch, namespace, out)
        return
    if not isinstance(schema, dict):
        return
    kind = schema.get("type")
    if kind in ("record", "error", "enum", "fixed"):
        name = str(schema.get("name", ""))
        ns = str(schema.get("namespace", namespace)) if "." not in name else name.rsplit(".", 1)[0]
        full = name if "." in name or not ns else f"{ns}.{name}"
        out[full] = out[full.rsplit(".", 1)[-1]] = schema
        for field in schema.get("fields", ()) if kind in ("record", "error") else ():
            _named_types(field.get("type"), ns, out)
    elif kind == "array":
        _named_types(schema.get("items"), namespace, out)
    elif kind == "map":
        _named_types(schema.get("values"), namespace, out)
    elif isinstance(kind, dict | list):
        _named_types(kind, namespace, out)


class _Walk:
    """One body walked against one schema."""

    def __init__(self, body: bytes, names: dict[str, Any], limits: DecodeLimits) -> None:
        self.body, self.names, self.limits = body, names, limits
        self.pos = 0
        self.items = 0

    def long(self) -> int:
        acc = shift = 0
        body, pos = self.body, self.pos
        while True:
            if pos >= len(body):
                raise DecodeBoundsError(f"truncated record at byte {pos}")
            b = body[pos]
            pos += 1
            acc |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
            if shift > 63:
                raise DecodeBoundsError(f"varint overflow at byte {self.pos}")
        self.pos = pos
        return (acc >> 1) ^ -(acc & 1)

    def take(self, n: int, what: str) -> None:
        if n < 0 or n > len(self.body) - self.pos:
            raise DecodeBoundsError(
                f"{what} of {n} bytes at byte {self.pos} exceeds the {len(self.body) - self.pos} "
                "bytes left"
            )
        self.pos += n

    def skip(self, t: Any, depth: int) -> None:
        if depth > self.limits.max_nesting:
            raise DecodeBoundsError(f"nesting deeper than {self.limits.max_nesting}")
        if isinstance(t, str):
            if t in _FIXED:
                self.take(_FIXED[t], t)
            elif t in ("int", "long"):
                self.long()
            elif t in ("string", "bytes"):
                self.take(self.long(), t)
            elif t in self.names:
                self.skip(self.names[t], depth + 1)
            else:
                raise DecodeBoundsError(f"unknown type {t!r} in the writer schema")
            return
        if isinstance(t, list):
            branch = self.long()
            if not 0 <= branch < len(t):
                raise DecodeBoundsError(f"union branch {branch} out of range at byte {self.pos}")
            self.skip(t[branch], depth + 1)
            return
        kind = t.get("type") if isinstance(t, dict) else None
        if kind in ("record", "error"):
            for field in t.get("fields", ()):
                self.skip(field.get("type"), depth + 1)
        elif kind == "enum":
            index = self.long()
            if not 0 <= index < len(t.get("symbols", ())):
                raise DecodeBoundsError(f"enum index {index} out of range")
        elif kind == "fixed":
            self.take(int(t.get("size", 0)), "fixed")
        elif kind in ("array", "map"):
            self.collection(t, kind, depth)
        elif kind is not None:  # a primitive with attributes (logical types) or a nested type
            self.skip(kind, depth)
        else:
            raise DecodeBoundsError(f"unsupported schema {t!r}")

    def collection(self, t: dict, kind: str, depth: int) -> None:
        while True:
            count = self.long()
            if count == 0:
                return
            if count < 0:  # a block with its size in bytes
                count = -count
                self.long()
            left = len(self.body) - self.pos
            if count > left:
                raise DecodeBoundsError(
                    f"{kind} block count {count} at byte {self.pos} exceeds the {left} bytes left"
                )
            self.items += count
            if self.items > self.limits.max_collection_items:
                raise DecodeBoundsError(
                    f"more than {self.limits.max_collection_items} collection items in a record"
                )
            for _ in range(count):
                if kind == "map":
                    self.take(self.long(), "map key")
                    self.skip(t.get("values"), depth + 1)
                else:
                    self.skip(t.get("items"), depth + 1)


def check_bounds(body: bytes, writer: dict, limits: DecodeLimits) -> None:
    """:class:`DecodeBoundsError` with the reason if ``body`` (one record, without header)
    breaks a bound or does not fit ``writer``; returns quickly either way."""
    if len(body) > limits.max_record_bytes:
        raise DecodeBoundsError(
            f"record of {len(body)} bytes exceeds max_record_bytes ({limits.max_record_bytes})"
        )
    names: dict[str, Any] = {}
    _named_types(writer, str(writer.get("namespace", "")), names)
    walk = _Walk(body, names, limits)
    walk.skip(writer, 0)
