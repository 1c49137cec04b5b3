"""The options of the ``streamon`` data source, parsed once on the driver into one value.

Spark hands a data source its options as strings in a case-insensitive mapping; everything
the executors need (topic, offsets, schema, bad-record policy) is resolved here, so that a bad
option fails at ``load()`` with a message that names it, not later inside a task.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from topics.avro import SchemaError, load_schema

ON_BAD_RECORD = ("fail", "skip")

#: columns the source adds to every record's own fields (prefixed, because result and stats
#: records may have fields called ``topic`` or ``partition`` themselves)
META_COLUMNS = ("_topic", "_partition", "_offset", "_timestamp", "_sign", "_key")


class OptionError(ValueError):
    """An option of the streamon data source is missing or malformed; the text names it."""


@dataclass(frozen=True)
class ReadOptions:
    """What one read covers and how it decodes."""

    topic: str
    bootstrap: str
    schema: dict | None = None  # the reader schema; None: the writer schema of the first record
    registry: str | None = None  # schema registry URL: Confluent wire format
    partitions: tuple[int, ...] | None = None  # None: every partition of the topic
    starting: Mapping[int, int] = field(default_factory=dict)  # absent: earliest
    ending: Mapping[int, int] = field(default_factory=dict)  # absent: the true end offset
    on_bad_record: str = "fail"
    max_batch_rows: int = 65_536
    timeout_s: float = 60.0
    consumer: Mapping[str, str] = field(default_factory=dict)  # extra librdkafka settings


def _get(options: Mapping[str, str], name: str) -> str | None:
    """Spark's option maps are case-insensitive; a plain dict (tests, helpers) may not be."""
    value = options.get(name)
    if value is None:
        value = options.get(name.lower())
    return None if value is None else str(value)


def parse_schema_option(text: str) -> dict:
    """An Avro schema from JSON text, a .avsc path, or a short name in ``schemas/``."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            schema = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise OptionError(f"option schema: not valid JSON ({exc})") from exc
        if not isinstance(schema, dict):
            raise OptionError("option schema: JSON must be an Avro record schema")
        return schema
    try:
        return load_schema(stripped)
    except SchemaError as exc:
        raise OptionError(f"option schema: {exc}") from exc


def parse_offsets(text: str | None, topic: str, name: str) -> dict[int, int]:
    """``earliest``/``latest`` (or absent): {}; else JSON ``{"0": 5}`` or ``{topic: {"0": 5}}``.

    The second form is the one Spark's own Kafka connector takes, so options carry over.
    """
    if text is None or text.strip().lower() in ("", "earliest", "latest"):
        return {}
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option {name}: not 'earliest', 'latest' or JSON ({exc})") from exc
    if isinstance(raw, dict) and topic in raw and isinstance(raw[topic], dict):
        raw = raw[topic]
    if not isinstance(raw, dict):
        raise OptionError(f'option {name}: expected {{"partition": offset, ...}}, got {text!r}')
    out: dict[int, int] = {}
    for part, offset in raw.items():
        try:
            p, o = int(part), int(offset)
        except (TypeError, ValueError) as exc:
            raise OptionError(f"option {name}: partition {part!r} -> {offset!r}: {exc}") from exc
        if p < 0:
            raise OptionError(f"option {name}: partition {p} is negative")
        if o < 0:  # -2/-1 (earliest/latest) are spelled as words here, not magic numbers
            raise OptionError(f"option {name}: offset {o} of partition {p} is negative")
        out[p] = o
    return out


def _int(options: Mapping[str, str], name: str, default: int, low: int) -> int:
    text = _get(options, name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError as exc:
        raise OptionError(f"option {name}: {text!r} is not an integer") from exc
    if value < low:
        raise OptionError(f"option {name}: {value} is below {low}")
    return value


def _choice(options: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    value = (_get(options, name) or choices[0]).strip().lower()
    if value not in choices:
        raise OptionError(f"option {name}: {value!r} is not one of {', '.join(choices)}")
    return value


def parse_options(options: Mapping[str, str]) -> ReadOptions:
    """Validate the data source options (see the README of the package for their meaning)."""
    topic = _get(options, "topic")
    if not topic:
        raise OptionError("option topic is required (the Kafka topic to read)")
    bootstrap = _get(options, "bootstrap") or _get(options, "kafka.bootstrap.servers")
    if not bootstrap:
        raise OptionError("option bootstrap is required (bootstrap.servers of the Kafka cluster)")
    schema_text = _get(options, "schema")
    parts_text = _get(options, "partitions")
    partitions = None
    if parts_text:
        try:
            partitions = tuple(sorted({int(p) for p in parts_text.split(",") if p.strip()}))
        except ValueError as exc:
            raise OptionError(f"option partitions: {parts_text!r} is not a list of ints") from exc
    starting = parse_offsets(_get(options, "startingOffsets"), topic, "startingOffsets")
    ending = parse_offsets(_get(options, "endingOffsets"), topic, "endingOffsets")
    for part, end in ending.items():
        if part in starting and starting[part] > end:
            raise OptionError(
                f"partition {part}: startingOffsets {starting[part]} is after endingOffsets {end}"
            )
    consumer = {
        str(k)[len("kafka.") :]: str(v)
        for k, v in options.items()
        if str(k).lower().startswith("kafka.") and str(k).lower() != "kafka.bootstrap.servers"
    }
    return ReadOptions(
        topic=topic,
        bootstrap=bootstrap,
        schema=parse_schema_option(schema_text) if schema_text else None,
        registry=_get(options, "registry") or None,
        partitions=partitions,
        starting=starting,
        ending=ending,
        on_bad_record=_choice(options, "onBadRecord", ON_BAD_RECORD),
        max_batch_rows=_int(options, "maxBatchRows", 65_536, 1),
        timeout_s=float(_int(options, "timeoutSeconds", 60, 1)),
        consumer=consumer,
    )
