"""Backlog from fetch high watermarks minus positions, for agents reading one or several topics
(an MJoin reads one topic per input: the topics' offsets must not be mixed)."""

from __future__ import annotations

from types import SimpleNamespace

from faust.types import TP

from processors.runtime.agents import backlog_of
from processors.runtime.stats import AgentStats


def fake_app(high: dict[TP, int]) -> SimpleNamespace:
    consumer = SimpleNamespace(assignment=lambda: set(high), highwater=lambda tp: high[tp])
    return SimpleNamespace(consumer=consumer)


def test_a_caught_up_join_reading_two_topics_has_no_backlog() -> None:
    stats = AgentStats("mjoin", "mjoin", topic="d.r", messages_in=10, tuples_in=10)
    # topic d.r is at 8,082 on partition 0, d.s at 10: both fully read
    for topic, partition, end in (("d.r", 0, 8_082), ("d.s", 0, 10), ("d.r", 1, 5), ("d.s", 1, 7)):
        stats.positions[partition] = end
        stats.topic_positions[(topic, partition)] = end
    high = {TP("d.r", 0): 8_082, TP("d.s", 0): 10, TP("d.r", 1): 5, TP("d.s", 1): 7}
    assert backlog_of(fake_app(high), stats)[0] == 0
    high[TP("d.s", 0)] = 25  # 15 new tuples on one input
    assert backlog_of(fake_app(high), stats)[0] == 15


def test_partitions_no_longer_held_leave_the_backlog() -> None:
    stats = AgentStats("filter", "filter", topic="in", messages_in=10, tuples_in=10)
    stats.positions.update({0: 10, 1: 10})
    high = {TP("in", 0): 30}  # partition 1 moved to another worker
    assert backlog_of(fake_app(high), stats)[0] == 20
    assert stats.positions == {0: 10}
