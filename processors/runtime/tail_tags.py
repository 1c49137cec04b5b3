"""How many messages of an exactly-once epoch a partition already holds, read from its tail.

Every message sent from an outbox carries the tag ``<agent>/<partition>/<epoch>`` in the
``streamon.eo`` header (:mod:`processors.runtime.exactly_once`); one header object serves a whole
epoch, so tagging costs nothing per message. One producer sends an epoch's messages in order, and
the idempotent producer neither reorders nor repeats them within a partition, so after a crash
each partition holds a prefix of the epoch's messages for it: their count is where a new sending
resumes.

The scan reads the partition backwards in growing windows and stops once nothing of the epoch can
be further back: at a tag of the same unit from an earlier epoch (its messages all precede the
epoch's), at a tag of any unit committed more than :data:`SEND_WINDOW_NS` before the epoch (sent
before it, since a worker that cannot send within its flush patience stops), or at the log start.
"""

from __future__ import annotations

from processors.runtime.kafka_security import KafkaSecurity
from topics.admin import tail_windows

TAG_HEADER = "streamon.eo"
#: an epoch's outputs are sent within the output producer's flush patience (120 s) of its commit
SEND_WINDOW_NS = 180 * 1_000_000_000


def tag(unit: str, epoch: int) -> bytes:
    return f"{unit}/{epoch}".encode()


def parse_tag(value: bytes) -> tuple[str, int] | None:
    """(unit, epoch) of a tag, or None if ``value`` is not one."""
    try:
        unit, epoch = value.decode().rsplit("/", 1)
        return unit, int(epoch)
    except (UnicodeDecodeError, ValueError):
        return None


def _tag_of(headers: tuple[tuple[str, bytes | None], ...]) -> tuple[str, int] | None:
    for key, value in headers:
        if key == TAG_HEADER and value is not None:
            return parse_tag(value)
    return None


def count_written(
    bootstrap: str,
    topic: str,
    partition: int,
    unit: str,
    epoch: int,
    security: KafkaSecurity | None = None,
) -> int:
    """How many messages of ``unit``'s ``epoch`` ``topic[partition]`` holds."""
    count = 0
    for window in tail_windows(bootstrap, topic, partition, security):
        done = False
        for record in window:
            found = _tag_of(record.headers)
            if found is None:
                continue
            if found[0] == unit:
                if found[1] == epoch:
                    count += 1
                elif found[1] < epoch:
                    done = True
            elif found[1] < epoch - SEND_WINDOW_NS:
                done = True
        if done:
            break
    return count
