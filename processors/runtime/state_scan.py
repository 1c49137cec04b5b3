"""Reading a unit's latest snapshot back from the state topic: key names, the header's checks,
and one backwards pass over the topic for many units at once (a rebalance restores several).

The pass reads the topic from its end in growing windows (:func:`topics.admin.tail_windows`)
and stops once every unit has its newest header and every chunk that header names, so a restore
reads the recent changes plus, at worst, the oldest chunk still in use: about the bytes of the
state itself, not every snapshot ever written. It logs its progress every few seconds.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from processors.runtime.kafka_security import KafkaSecurity
from topics.admin import tail_windows

log = logging.getLogger(__name__)

#: the key suffix of a unit's "outbox sent" note (exactly-once mode)
SENT = "sent"
#: most chunks a header may name (a header of at most about 600 KB)
MAX_CHUNKS = 16_384
#: most outbox records a header may announce
MAX_OUTBOX_CHUNKS = 4_096
#: how long one restore pass may read before it gives up
SCAN_TIMEOUT_S = 600.0
_PROGRESS_EVERY_S = 2.0


class StateRestoreError(RuntimeError):
    """A stored snapshot that cannot be restored; names the record and the reason."""

    def __init__(self, topic: str, partition: int, offset: int, key: str, reason: str) -> None:
        super().__init__(
            f"state snapshot {key!r} at {topic}[{partition}]@{offset} cannot be restored: {reason}"
        )
        self.topic, self.partition, self.offset, self.key = topic, partition, offset, key
        self.reason = reason

    def because(self, reason: str) -> StateRestoreError:
        return StateRestoreError(self.topic, self.partition, self.offset, self.key, reason)


def header_key(agent: str, partition: int) -> str:
    return f"{agent}/{partition}"


def chunk_key(base: str, name: str) -> str:
    """The key of a content-addressed chunk ``name`` (``<writer>.<hash>``) of unit ``base``."""
    return f"{base}/c/{name}"


@dataclass(frozen=True)
class Header:
    """A header record's fields, checked: the chunk keys of the snapshot in order."""

    positions: dict[str, int]
    epoch: int
    chunk_keys: list[str]
    outbox: int


@dataclass
class Found:
    """A unit's newest header record, the records of its keys seen with it (chunk key ->
    value; None for a deletion; keys never seen are absent), and its newest "sent" note."""

    header: Any
    pieces: dict[str, bytes | None] = field(default_factory=dict)
    sent: bytes | None = None


def parse_header(value: bytes | None, base: str, at: StateRestoreError) -> Header:
    """A header record checked field by field (``at`` names it in errors). Version 2 names
    content-addressed chunks; the first version counted chunks keyed by epoch."""
    try:
        header: Any = json.loads(value or b"")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise at.because(f"header is not JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise at.because("header is not a JSON object")
    positions, chunks, epoch = header.get("positions"), header.get("chunks"), header.get("epoch")
    if not isinstance(positions, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and v >= 0 for k, v in positions.items()
    ):
        raise at.because(f"header positions {positions!r} are not topic -> offset")
    if not isinstance(epoch, int):
        raise at.because(f"header epoch {epoch!r} is not an integer")
    if header.get("v") == 2:
        if not isinstance(chunks, list) or not all(
            isinstance(c, str) and c and "/" not in c for c in chunks
        ):
            raise at.because("header chunks are not a list of chunk names")
        if len(chunks) > MAX_CHUNKS:
            raise at.because(f"header names {len(chunks)} chunks (at most {MAX_CHUNKS})")
        keys = [chunk_key(base, c) for c in chunks]
    else:
        if not isinstance(chunks, int) or not 1 <= chunks <= 1024:
            raise at.because(f"header announces {chunks!r} chunks (1..1024)")
        keys = [f"{base}/{epoch}/{i}" for i in range(chunks)]
    n_out = header.get("outbox", 0)
    if not isinstance(n_out, int) or not 0 <= n_out <= MAX_OUTBOX_CHUNKS:
        raise at.because(f"header announces {n_out!r} outbox chunks (0..{MAX_OUTBOX_CHUNKS})")
    return Header(positions, epoch, keys, n_out)


def _needed(base: str, value: bytes | None) -> set[str] | None:
    """The keys a header names, read loosely (the full check comes when it is loaded); None
    for a header that does not read, which then names nothing to wait for."""
    try:
        parsed = parse_header(value, base, StateRestoreError("", 0, 0, base, ""))
    except StateRestoreError:
        return None
    outbox = {f"{base}/{parsed.epoch}/o{i}" for i in range(parsed.outbox)}
    return set(parsed.chunk_keys) | outbox


def scan_latest(
    bootstrap: str,
    topic: str,
    bases: set[str],
    security: KafkaSecurity | None = None,
    progress: dict[str, Any] | None = None,
) -> dict[str, Found]:
    """What each of ``bases`` (``<agent>/<partition>`` keys) needs to restore its newest
    snapshot, read backwards from the end of partition 0 of ``topic``; units without a header
    are absent. ``progress`` is kept up to date as the pass goes (the status page shows it)."""
    found: dict[str, Found] = {}
    needed: dict[str, set[str]] = {}
    pieces: dict[str, dict[str, bytes | None]] = {base: {} for base in bases}
    sent: dict[str, bytes] = {}
    started = last_report = time.monotonic()
    records = nbytes = 0
    windows = tail_windows(bootstrap, topic, 0, security, timeout=SCAN_TIMEOUT_S)
    for window in windows:
        for record in reversed(window):
            records += 1
            nbytes += len(record.value or b"")
            try:
                key = (record.key or b"").decode()
            except UnicodeDecodeError:
                continue  # not a key of ours: it names no unit
            if key in bases:
                if key not in found:
                    found[key] = Found(record)
                    needed[key] = _needed(key, record.value) or set()
                continue
            base, _, last = key.rpartition("/")
            if last == SENT:
                if base in bases and base not in sent and record.value is not None:
                    sent[base] = record.value
                continue
            base = base.rpartition("/")[0]
            have = pieces.get(base)
            if have is not None and key not in have:
                have[key] = record.value  # the newest record of the key wins, deletions too
        if progress is not None:
            progress.update(units=len(bases), found=len(found), records=records, bytes=nbytes,
                            seconds=round(time.monotonic() - started, 1))  # fmt: skip
        if time.monotonic() - last_report > _PROGRESS_EVERY_S:
            last_report = time.monotonic()
            log.info("restoring %d units from %s: %d found, %d records (%.1f MB) read so far",
                     len(bases), topic, len(found), records, nbytes / 1e6)  # fmt: skip
        if len(found) == len(bases) and all(
            k in pieces[b] for b, keys in needed.items() for k in keys
        ):
            break
    for base, entry in found.items():
        entry.pieces = {k: pieces[base][k] for k in needed[base] if k in pieces[base]}
        entry.sent = sent.get(base)
    log.info("state of %d units read from %s in %.1f s: %d records, %.1f MB",
             len(found), topic, time.monotonic() - started, records, nbytes / 1e6)  # fmt: skip
    return found
