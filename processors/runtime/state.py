"""Stage state that survives a restart or a partition moving: snapshots on a compacted topic.

A stateful agent (window, MJoin, aggregate) keeps one stage object per partition. Before the
consumer commits offsets, every partition whose state changed is pickled and written to the
query's state topic together with the input positions it reflects (``topic -> next offset``);
the commit happens only after those writes are acknowledged. So the committed offsets never run
ahead of a snapshot. A worker that takes a partition over reads its latest snapshot, restores
the stage, and skips the input records the snapshot already covers: after a graceful stop the
results continue exactly; after a crash, records after the last snapshot are processed again
and their results repeat (at-least-once), none are lost.

Records: ``<agent>/<partition>`` holds a small JSON header (positions, number of chunks, an
epoch); ``<agent>/<partition>/<epoch>/<i>`` the chunks of the pickle, so that a large window
fits the broker's message size. The topic is compacted: only the latest header and chunks of
each key stay. Pickle is used because the state is our own objects on our own internal topic;
anyone able to write that topic can already change results.
"""

from __future__ import annotations

import json
import logging
import pickle
import time
from typing import Any

from processors.runtime.producer import RecordProducer
from topics.admin import read_topic

log = logging.getLogger(__name__)

CHUNK_BYTES = 512 * 1024


def _header_key(agent: str, partition: int) -> str:
    return f"{agent}/{partition}"


class StateSnapshots:
    """Writes and reads stage snapshots on one state topic."""

    def __init__(self, bootstrap: str, topic: str, producer: RecordProducer) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.producer = producer
        self.saved = 0
        self.saved_bytes = 0
        self.loaded = 0

    def save(self, agent: str, partition: int, positions: dict[str, int], state: Any) -> int:
        """Queue one snapshot (flush the producer to make it durable); returns its size."""
        payload = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        epoch = time.time_ns()
        chunks = [payload[i : i + CHUNK_BYTES] for i in range(0, len(payload), CHUNK_BYTES)]
        base = _header_key(agent, partition)
        for i, chunk in enumerate(chunks or [b""]):
            self.producer.produce(self.topic, chunk, key=f"{base}/{epoch}/{i}".encode())
        header = {"positions": positions, "chunks": max(len(chunks), 1), "epoch": epoch}
        self.producer.produce(self.topic, json.dumps(header).encode(), key=base.encode())
        self.saved += 1
        self.saved_bytes += len(payload)
        return len(payload)

    def load(self, agent: str, partition: int) -> tuple[dict[str, int], Any] | None:
        """The latest snapshot of ``agent``'s ``partition``: (positions, state), or None."""
        base = _header_key(agent, partition)
        header: dict[str, Any] | None = None
        chunks: dict[str, bytes] = {}
        for record in read_topic(self.bootstrap, self.topic):
            key = (record.key or b"").decode()
            if key == base:
                header = json.loads(record.value or b"{}")
            elif key.startswith(base + "/"):
                chunks[key] = record.value or b""
        if header is None:
            return None
        epoch, n = header["epoch"], header["chunks"]
        parts = [chunks.get(f"{base}/{epoch}/{i}") for i in range(n)]
        if any(p is None for p in parts):
            raise RuntimeError(f"state snapshot {base} (epoch {epoch}) is missing chunks")
        self.loaded += 1
        state = pickle.loads(b"".join(parts))  # noqa: S301 (our own internal topic, see above)
        positions = {str(k): int(v) for k, v in header["positions"].items()}
        return positions, state
