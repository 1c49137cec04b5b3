"""One warning every few seconds instead of thousands while the broker is away.

When the broker goes (a restart, a network cut), every Kafka client of a worker retries its
connection every fraction of a second and logs each failure: aiokafka (Faust's consumer),
librdkafka (the output producer, through the ``streamon.kafka`` logger). A worker rides such an
outage out (:meth:`processors.runtime.producer.RecordProducer.flush_blocking` waits for the broker
to come back), so what its log should say is that it is waiting, once per interval, with how many
messages like it were held back: :class:`RepeatFilter` does that for any repeated message.
"""

from __future__ import annotations

import logging
import time

#: a message repeated within this many seconds is held back (and counted)
INTERVAL_S = 5.0


class RepeatFilter(logging.Filter):
    """Passes a log message (by logger and format string) at most once per ``interval_s``; the
    next one that passes says how many were held back in between. Debug records pass untouched."""

    def __init__(self, interval_s: float = INTERVAL_S) -> None:
        super().__init__()
        self.interval_s = interval_s
        self._last: dict[tuple[str, str], float] = {}
        self._held: dict[tuple[str, str], int] = {}
        self.held_back = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.INFO:
            return True
        key = (record.name, str(record.msg))
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self._held[key] = self._held.get(key, 0) + 1
            self.held_back += 1
            return False
        self._last[key] = now
        held = self._held.pop(key, 0)
        if held:
            record.msg = f"{record.msg} [{held} more like this in the last {self.interval_s:.0f} s]"
        if len(self._last) > 10_000:  # many distinct messages: forget the old ones
            self._last = {k: t for k, t in self._last.items() if now - t < self.interval_s}
        return True


def install(logger: logging.Logger | None = None) -> RepeatFilter:
    """Put one :class:`RepeatFilter` on every handler of ``logger`` (default: the root logger,
    whose handlers every library's records reach)."""
    target = logger or logging.getLogger()
    repeat = RepeatFilter()
    for handler in target.handlers:
        if not any(isinstance(f, RepeatFilter) for f in handler.filters):
            handler.addFilter(repeat)
    return repeat
