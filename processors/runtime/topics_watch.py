"""A broker that lost the worker's topics stops the worker with that reason (exit 69).

The embedded broker keeps its data in memory: restarted, it comes back on the same port with no
topic. The worker notices in two ways, whichever comes first: its periodic check finds the
topics missing, or a write fails (the restarted broker no longer knows the idempotent producer's
id, a fatal error). Both end in the same message, so the operator learns the cause rather than
"could not write its output".
"""

from __future__ import annotations

from collections.abc import Iterable

from processors.runtime.context import before_output_stop, stop_worker
from processors.runtime.kafka_security import KafkaSecurity

#: how often a worker checks that its topics still exist
TOPICS_CHECK_S = 10.0
#: exit status of a worker whose topics are gone (EX_UNAVAILABLE)
EXIT_TOPICS_GONE = 69
#: how long one check waits for the broker's metadata
CHECK_TIMEOUT_S = 5.0


class TopicsWatch:
    """The topics one worker reads and writes, checked against the broker's metadata."""

    def __init__(
        self, bootstrap: str, topics: Iterable[str], security: KafkaSecurity | None = None
    ) -> None:
        self.bootstrap = bootstrap
        self.topics = sorted(set(topics))
        self.security = security

    def gone(self) -> list[str]:
        """The watched topics the broker does not have (raises when the broker is away)."""
        from topics.admin import partition_counts

        found = partition_counts(
            self.bootstrap, self.topics, CHECK_TIMEOUT_S, security=self.security
        )
        return [t for t in self.topics if t not in found]

    def stop_if_gone(self) -> None:
        """Stop the worker (exit 69) if any topic is gone; a broker that is away is not a stop:
        the clients wait for it to come back."""
        try:
            gone = self.gone()
        except Exception:
            return
        if gone:
            stop_worker(
                f"topics {gone} are gone from the broker at {self.bootstrap} (a broker that "
                "keeps its data in memory, like the embedded one, loses every topic when it "
                "restarts); the worker stops. Start it again: it creates the topics, and the "
                "inputs must be published again",
                EXIT_TOPICS_GONE,
            )

    def before_output_stops(self) -> None:
        """A write that fails checks the topics first, so that a lost topic is the reason."""
        before_output_stop(self.stop_if_gone)
