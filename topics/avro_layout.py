"""Flat layouts of Avro records for the bulk codec: leaves, nullability, schema resolution.

A record schema becomes a list of :class:`FlatField` leaves, one per column of a batch: nested
records flattened to dotted names, ``["null", T]`` unions as ``T`` plus a null flag, enums,
fixed, and logical types on their base type; arrays and maps are one leaf each, whose value the
codec passes through as its Avro encoding (:mod:`topics.avro_collections`). :func:`resolve_flat`
matches a writer's leaves to a reader's by the Avro resolution rules, once per writer schema.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from topics.avro import SchemaError, _parse, schema_name
from topics.avro_collections import expanded

PRIMITIVE_TYPES = ("boolean", "int", "long", "float", "double", "string", "bytes")
COLLECTION_TYPES = ("array", "map")
NESTED_SEP = "."  # a nested record's field ``lat`` of field ``loc`` is the column ``loc.lat``


@dataclass(frozen=True, slots=True)
class FlatField:
    """One leaf of a record: its Avro type reduced to what the bulk kernels handle.

    Nested records are flattened depth first, ``name`` joining the field names with
    :data:`NESTED_SEP`; ``["null", T]`` / ``[T, "null"]`` unions are ``T`` with ``null_index``
    the branch number of ``"null"`` (the batch then has a companion null column, see
    :func:`processors.core.batch.null_column`). Logical types keep their base type.
    """

    name: str
    type: str  # one of PRIMITIVE_TYPES, "enum", "fixed", "array" or "map"
    symbols: tuple[str, ...] = ()  # enum symbols
    enum_name: str = ""
    enum_default: str | None = None  # the enum's own default symbol (schema evolution)
    has_default: bool = False
    default: Any = None  # for a nullable field, None means null
    aliases: tuple[str, ...] = ()
    null_index: int = -1  # union branch of "null" (0 or 1); -1: the field is never null
    size: int = 0  # fixed: the number of bytes of every value
    fixed_name: str = ""
    logical: str = ""  # the logicalType, if any (the column holds the base type's values)
    path: tuple[tuple[str, ...], ...] = ()  # per nesting level: the field's name and aliases
    items: Any = None  # array items / map values, named types inlined (topics.avro_collections)

    @property
    def collection_schema(self) -> dict[str, Any]:
        """An array or map field's own type, standalone (for output schemas and defaults)."""
        return {"type": self.type, "items" if self.type == "array" else "values": self.items}

    @property
    def nullable(self) -> bool:
        return self.null_index >= 0


_NO_DEFAULT = object()


class _Flattener:
    """Walks a record schema into :class:`FlatField` leaves, remembering named types."""

    def __init__(self, rec: str) -> None:
        self.rec = rec
        self.named: dict[str, dict] = {}

    def unsupported(self, fname: str, t: Any, why: str = "") -> SchemaError:
        return SchemaError(
            f"schema {self.rec}: field '{fname}' has unsupported type {json.dumps(t)} "
            f"({why or 'bulk codec supports ' + ', '.join(PRIMITIVE_TYPES)}, enum, fixed, "
            'nested records, arrays and maps (passed through) and ["null", T] unions of those)'
        )

    def lookup(self, t: Any) -> Any:
        if isinstance(t, str) and t not in PRIMITIVE_TYPES:
            return self.named.get(t, self.named.get(t.rsplit(".", 1)[-1], t))
        return t

    def remember(self, t: dict) -> None:
        self.named[str(t["name"]).rsplit(".", 1)[-1]] = t

    def fields(self, record: dict, prefix: str, path: tuple, default: Any) -> list[FlatField]:
        out: list[FlatField] = []
        for f in record["fields"]:
            fdefault = f.get("default", _NO_DEFAULT)
            if default is not _NO_DEFAULT:  # the enclosing record's default names this value
                fdefault = default.get(f["name"], fdefault) if isinstance(default, dict) else (
                    _NO_DEFAULT)  # fmt: skip
            names = (f["name"], *f.get("aliases", ()))
            out += self.leaf(f["type"], prefix + f["name"], (*path, names), fdefault)
        return out

    def leaf(self, t: Any, name: str, path: tuple, default: Any) -> list[FlatField]:
        t = self.lookup(t)
        null_index = -1
        if isinstance(t, list):
            if len(t) != 2 or "null" not in t or t[0] == t[1]:
                raise self.unsupported(name, t)
            null_index = t.index("null")
            t = self.lookup(t[1 - null_index])
        kind = t.get("type") if isinstance(t, dict) else t
        if kind == "record":
            if null_index >= 0:
                raise self.unsupported(name, t, "a nullable record is not supported yet")
            self.remember(t)
            return self.fields(t, name + NESTED_SEP, path, default)
        extra: dict[str, Any] = {}
        if kind == "enum":
            self.remember(t)
            extra = dict(symbols=tuple(t["symbols"]), enum_default=t.get("default"),
                         enum_name=str(t["name"]).rsplit(".", 1)[-1])  # fmt: skip
        elif kind == "fixed":
            self.remember(t)
            extra = dict(size=int(t["size"]), fixed_name=str(t["name"]).rsplit(".", 1)[-1])
        elif kind in COLLECTION_TYPES:
            extra = dict(items=expanded(t["items" if kind == "array" else "values"], self.named,
                                        set()))  # fmt: skip
        elif not (isinstance(kind, str) and kind in PRIMITIVE_TYPES):
            raise self.unsupported(name, t)
        logical = t.get("logicalType", "") if isinstance(t, dict) else ""
        return [
            FlatField(
                name=name,
                type=kind,
                has_default=default is not _NO_DEFAULT,
                default=None if default is _NO_DEFAULT else default,
                aliases=tuple(path[-1][1:]),
                null_index=null_index,
                logical=str(logical),
                path=path,
                **extra,
            )
        ]


def flat_fields(schema: dict) -> list[FlatField]:
    """Leaves of a record schema; SchemaError naming the field for anything unsupported."""
    _parse(schema)
    rec = schema_name(schema)
    if schema.get("type") != "record":
        raise SchemaError(f"schema {rec}: top level must be a record, not {schema.get('type')!r}")
    walker = _Flattener(rec)
    walker.remember(schema)
    return walker.fields(schema, "", (), _NO_DEFAULT)


PROMOTIONS = {
    ("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"), ("long", "double"),
    ("float", "double"), ("string", "bytes"), ("bytes", "string"),
}  # fmt: skip


@dataclass
class Resolution:
    """How each reader field is filled from one writer schema (the Avro resolution rules)."""

    writer_fields: list[FlatField] | None  # None: the writer is not flat (bulk kernels can't read)
    sources: list[int]  # per reader field: writer field index, or -1 to use the reader's default
    enum_maps: list[list[int] | None]  # per reader field: writer symbol -> reader index, -1 unknown
    error: str | None = None  # the schemas do not resolve: no record of this writer can be read


def _candidates(rf: FlatField) -> list[str]:
    """Every dotted name a writer may give reader leaf ``rf`` (its names and aliases per level)."""
    names = [""]
    for level in rf.path or ((rf.name, *rf.aliases),):
        names = [f"{p}{NESTED_SEP if p else ''}{n}" for p in names for n in level]
    return names


def _shape_clash(rf: FlatField, cands: list[str], index: dict[str, int]) -> str | None:
    """A reader leaf the writer has as a record, or nested under what the writer has as a leaf."""
    for c in cands:
        if any(w.startswith(c + NESTED_SEP) for w in index):
            return f"field '{rf.name}': writer type record cannot be read as {rf.type}"
        parts = c.split(NESTED_SEP)
        for k in range(1, len(parts)):
            if NESTED_SEP.join(parts[:k]) in index:
                prefix = NESTED_SEP.join(parts[:k])
                return f"field '{prefix}': writer type is not a record, the reader's is"
    return None


def _type_problem(rf: FlatField, wf: FlatField) -> str | None:
    if wf.type in COLLECTION_TYPES or rf.type in COLLECTION_TYPES:
        shape = lambda f: json.dumps(f.collection_schema if f.type in COLLECTION_TYPES else f.type,  # noqa: E731
                                     sort_keys=True)  # fmt: skip
        if shape(wf) != shape(rf):
            return (
                f"field '{rf.name}': writer type {shape(wf)} differs from the reader's "
                f"{shape(rf)}; arrays and maps pass through, so both must be the same"
            )
        return None
    if wf.type == "fixed" or rf.type == "fixed":
        if wf.type != rf.type or wf.fixed_name != rf.fixed_name or wf.size != rf.size:
            what = lambda f: f"fixed {f.fixed_name}[{f.size}]" if f.type == "fixed" else f.type  # noqa: E731
            return f"field '{rf.name}': writer type {what(wf)} cannot be read as {what(rf)}"
        return None
    if wf.type == "enum" and rf.type == "enum":
        if wf.enum_name != rf.enum_name:
            return f"field '{rf.name}': enum {wf.enum_name} is not {rf.enum_name}"
        return None
    if wf.type != rf.type and (wf.type, rf.type) not in PROMOTIONS:
        return f"field '{rf.name}': writer type {wf.type} cannot be read as {rf.type}"
    return None


def resolve_flat(writer: dict, reader: dict, rfields: list[FlatField]) -> Resolution:
    """Match a writer schema to a flat reader schema, once per writer.

    Leaves match by dotted name (reader aliases allowed at every level). A nullable writer
    field read by a non-nullable reader field resolves (Avro: the union's branch decides per
    record); the codec makes each record whose value is null an error. The reverse, a plain
    writer field read as nullable, never gives nulls.
    """
    try:
        wfields: list[FlatField] | None = flat_fields(writer)
    except SchemaError:
        wfields = None
    res = Resolution(wfields, [], [])
    problems: list[str] = []
    wname, rname = schema_name(writer), schema_name(reader)
    names = {rname, rname.rsplit(".", 1)[-1], *reader.get("aliases", ())}
    if wname not in names and wname.rsplit(".", 1)[-1] not in names:
        problems.append(f"writer schema {wname} does not match reader schema {rname}")
    index = {f.name: i for i, f in enumerate(wfields or ())}
    for rf in rfields:
        cands = _candidates(rf)
        w = next((index[a] for a in cands if a in index), -1)
        res.sources.append(w)
        res.enum_maps.append(None)
        if wfields is None:
            continue
        if w < 0:
            clash = _shape_clash(rf, cands, index)
            if clash is not None:
                problems.append(clash)
            elif not rf.has_default:
                problems.append(
                    f"reader field '{rf.name}' has no default and is missing in {wname}"
                )
            continue
        wf = wfields[w]
        problem = _type_problem(rf, wf)
        if problem is not None:
            problems.append(problem)
        elif wf.type == "enum" and rf.type == "enum":
            pos = {sym: i for i, sym in enumerate(rf.symbols)}
            dflt = pos.get(rf.enum_default, -1) if rf.enum_default is not None else -1
            res.enum_maps[-1] = [pos.get(sym, dflt) for sym in wf.symbols]
    res.error = problems[0] if problems else None
    return res
