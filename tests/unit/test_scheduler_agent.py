"""The scheduler agent's logic and the control records (processors/runtime/scheduler.py and
control.py), without a broker: statistics in, a published plan out, and what every worker's
arbiter makes of the records it reads."""

from __future__ import annotations

import json

import pytest

from processors.core.scheduling.config import SchedulingConfig
from processors.runtime.arbiter import Arbiter
from processors.runtime.control import (
    POLICY,
    PRIORITIES,
    RESET_TO_QUERY,
    ControlRecord,
    decode_control,
    encode_control,
)
from processors.runtime.scheduler import (
    HEARTBEAT_S,
    PUBLISH_EVERY_S,
    Scheduling,
    plan_from_json,
    plan_to_json,
)
from topics.avro import SchemaStore

PATHS = {"r": ["ingest.r", "op.a", "op.b", "op.c", "sink"]}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _stats_record(agent: str, tuples_in: int, tuples_out: int, busy_ms: float, end_s: float):
    return {
        "query": "q", "scope": "AGENT", "agent": agent, "tuples_in": tuples_in,
        "tuples_out": tuples_out, "busy_ns": int(busy_ms * 1e6), "batches": 10,
        "window_end_ms": int(end_s * 1000),
    }  # fmt: skip


def _scheduling(config: SchedulingConfig, clock: Clock) -> tuple[Scheduling, list[bytes]]:
    published: list[bytes] = []
    scheduling = Scheduling("q", PATHS, config, Arbiter(), published.append, "w1", clock=clock)
    return scheduling, published


def _feed(scheduling: Scheduling, clock: Clock) -> None:
    # op.b is fast and selective, behind a slow op.a: Chain puts ingest..op.b in one chain
    for agent, n_in, n_out, busy in [
        ("ingest.r", 10_000, 10_000, 10.0),
        ("op.a", 10_000, 9_000, 40.0),
        ("op.b", 9_000, 900, 9.0),
        ("op.c", 900, 900, 90.0),
        ("sink", 900, 900, 1.0),
    ]:
        scheduling.on_stats(_stats_record(agent, n_in, n_out, busy, clock.now))


def _decode(raw: bytes) -> ControlRecord:
    return decode_control(raw, SchemaStore())


def test_the_scheduler_publishes_measured_statistics_and_every_worker_installs_the_policy() -> None:
    clock = Clock()
    scheduling, published = _scheduling(SchedulingConfig("chain"), clock)
    assert not scheduling.tick()  # no statistics yet: not the scheduler
    _feed(scheduling, clock)
    assert scheduling.tick()
    assert not scheduling.tick()  # not again before PUBLISH_EVERY_S
    record = _decode(published[0])
    assert (record.kind, record.query, record.issuer) == (PRIORITIES, "q", "w1")
    plan = plan_from_json(record.payload["plan"])
    assert plan.paths == PATHS
    assert plan.stats["op.b"] == pytest.approx((1e-6, 0.1))
    assert plan.stats["op.a"] == pytest.approx((4e-6, 0.9))

    scheduling.apply(record)  # what every worker's control reader does
    snap = scheduling.snapshot()
    assert snap["policy"] == "chain" and snap["plan_version"] == 1
    prio = scheduling.arbiter.policy.priorities()
    assert prio["ingest.r"] == prio["op.a"] == prio["op.b"] > prio["op.c"]
    change = scheduling.events()
    assert change[0]["kind"] == "priorities"
    assert change[0]["to"][0] == ["ingest.r", "op.a", "op.b"]
    assert scheduling.events() == []  # reported once

    clock.now += PUBLISH_EVERY_S
    _feed(scheduling, clock)
    assert not scheduling.tick()  # same figures: nothing new to publish
    clock.now += HEARTBEAT_S
    _feed(scheduling, clock)
    assert scheduling.tick()  # ... until the heartbeat
    scheduling.apply(_decode(published[1]))
    assert scheduling.events() == []  # same ranking: no new change


def test_a_material_change_is_published_at_the_next_check() -> None:
    clock = Clock()
    scheduling, published = _scheduling(SchedulingConfig("chain"), clock)
    _feed(scheduling, clock)
    assert scheduling.tick()
    clock.now += PUBLISH_EVERY_S + 10  # the first window has expired
    # op.b now keeps everything: the chain breaks up
    for agent, n_in, n_out, busy in [
        ("ingest.r", 10_000, 10_000, 10.0),
        ("op.a", 10_000, 9_000, 40.0),
        ("op.b", 9_000, 9_000, 9.0),
        ("op.c", 9_000, 9_000, 900.0),
        ("sink", 9_000, 9_000, 10.0),
    ]:
        scheduling.on_stats(_stats_record(agent, n_in, n_out, busy, clock.now))
    assert scheduling.tick()
    scheduling.apply(_decode(published[-1]))
    assert plan_from_json(_decode(published[-1]).payload["plan"]).stats["op.b"][1] == 1.0


def test_a_policy_record_switches_every_worker_at_once_and_the_scheduler_follows() -> None:
    clock = Clock()
    scheduling, published = _scheduling(SchedulingConfig("chain"), clock)
    _feed(scheduling, clock)
    scheduling.tick()
    scheduling.apply(_decode(published[0]))
    raw = encode_control(POLICY, "q", {"policy": "chain-flush", "latency_ms": 250.0}, "cli")
    scheduling.apply(_decode(raw))
    assert scheduling.arbiter.policy.name == "chain-flush"
    assert scheduling.snapshot()["config"]["latency_ms"] == 250.0
    clock.now += PUBLISH_EVERY_S
    _feed(scheduling, clock)
    scheduling.tick()
    republished = _decode(published[-1])
    assert republished.payload["policy"] == "chain-flush"
    assert plan_from_json(republished.payload["plan"]).latency_threshold == {"q": 0.25}

    scheduling.apply(_decode(encode_control(POLICY, "q", {"policy": "off"}, "cli")))
    assert not scheduling.arbiter.enabled


def test_a_reset_record_puts_the_query_back_on_its_own_schedule() -> None:
    clock = Clock()
    mine = SchedulingConfig.from_mapping({"policy": "mixed", "gamma": 50.0, "quantum_ms": 4.0})
    scheduling, published = _scheduling(mine, clock)
    _feed(scheduling, clock)
    scheduling.tick()
    scheduling.apply(_decode(published[0]))
    scheduling.apply(_decode(encode_control(POLICY, "q", {"policy": "fifo"}, "cli")))
    assert scheduling.arbiter.policy.name == "fifo"
    scheduling.apply(_decode(encode_control(POLICY, "q", {RESET_TO_QUERY: True}, "cli")))
    assert scheduling.config == mine and scheduling.arbiter.policy.name == "mixed"
    assert [c["to"]["policy"] for c in scheduling.changes if c["kind"] == "policy"] == [
        "fifo", "mixed",
    ]  # fmt: skip


def test_a_bad_policy_record_is_refused_with_its_reason() -> None:
    clock = Clock()
    scheduling, _ = _scheduling(SchedulingConfig("chain"), clock)
    with pytest.raises(ValueError, match="latency_ms"):
        scheduling.apply(_decode(encode_control(POLICY, "q", {"policy": "chain-flush"}, "cli")))
    with pytest.raises(ValueError, match="unknown scheduling policy"):
        scheduling.apply(_decode(encode_control(POLICY, "q", {"policy": "edf"}, "cli")))
    assert scheduling.config.policy == "chain"


def test_control_records_round_trip_and_bad_ones_are_named() -> None:
    raw = encode_control(PRIORITIES, "q", {"a": [1, 2]}, "w9", seq=4, stage="s")
    record = _decode(raw)
    assert (record.kind, record.query, record.stage, record.payload, record.seq) == (
        PRIORITIES, "q", "s", {"a": [1, 2]}, 4,
    )  # fmt: skip
    with pytest.raises(ValueError):
        _decode(b"not avro")


def test_plans_survive_json() -> None:
    clock = Clock()
    scheduling, published = _scheduling(SchedulingConfig("chain"), clock)
    _feed(scheduling, clock)
    scheduling.tick()
    plan = plan_from_json(_decode(published[0]).payload["plan"])
    again = plan_from_json(json.loads(json.dumps(plan_to_json(plan))))
    assert again.paths == plan.paths and again.stats == plan.stats
    assert again.remaining_time == plan.remaining_time


def test_leadership_lapses_without_statistics() -> None:
    clock = Clock()
    scheduling, _ = _scheduling(SchedulingConfig("chain"), clock)
    _feed(scheduling, clock)
    assert scheduling.leading
    clock.now += 60
    assert not scheduling.leading
    assert not scheduling.tick()


TWIN_PATHS = {"r": ["ingest.r", "op.r"], "s": ["ingest.s", "op.s"]}


def _feed_twins(scheduling: Scheduling, clock: Clock, busy_r: float, busy_s: float) -> None:
    """Two symmetric pipelines; op.r's and op.s's costs (ms per 10,000 tuples) may differ."""
    for agent, n_in, n_out, busy in [
        ("ingest.r", 10_000, 10_000, 10.0),
        ("op.r", 10_000, 5_000, busy_r),
        ("ingest.s", 10_000, 10_000, 10.0),
        ("op.s", 10_000, 5_000, busy_s),
    ]:
        scheduling.on_stats(_stats_record(agent, n_in, n_out, busy, clock.now))


def test_near_equal_priorities_swapping_on_noise_is_not_material_a_clear_overtake_is() -> None:
    clock = Clock()
    published: list[bytes] = []
    scheduling = Scheduling("q", TWIN_PATHS, SchedulingConfig("chain"), Arbiter(),
                            published.append, "w1", clock=clock)  # fmt: skip
    _feed_twins(scheduling, clock, busy_r=20.0, busy_s=21.0)  # r's pipeline slightly ahead
    assert scheduling.tick()
    scheduling.apply(_decode(published[-1]))
    prio = scheduling.arbiter.policy.priorities()
    assert prio["op.r"] > prio["op.s"]

    # the window (5 s) now sums both reports: 41 ms each, the two pipelines tie
    clock.now += PUBLISH_EVERY_S
    _feed_twins(scheduling, clock, busy_r=21.0, busy_s=20.0)
    assert not scheduling.tick()  # a new ranking, but by nothing like the margin

    # 73 against 61 ms: s's chain is now steeper by ~13%, more than the 10% margin
    clock.now += PUBLISH_EVERY_S
    _feed_twins(scheduling, clock, busy_r=32.0, busy_s=20.0)
    assert scheduling.tick()
    scheduling.apply(_decode(published[-1]))
    prio = scheduling.arbiter.policy.priorities()
    assert prio["op.s"] > prio["op.r"]
    assert scheduling.events()[-1]["to"][0] == ["ingest.s", "op.s"]


def test_a_new_scheduler_goes_on_from_the_last_published_version() -> None:
    clock = Clock()
    old_leader, published = _scheduling(SchedulingConfig("chain"), clock)
    _feed(old_leader, clock)
    for _ in range(3):
        clock.now += HEARTBEAT_S
        _feed(old_leader, clock)
        assert old_leader.tick()
    assert _decode(published[-1]).payload["version"] == 3
    new_leader, republished = _scheduling(SchedulingConfig("chain"), clock)
    for raw in published:  # what the other worker read from the control topic
        new_leader.apply(_decode(raw))
    _feed(new_leader, clock)  # the stats partition moved: this worker now leads
    assert new_leader.tick()
    assert _decode(republished[-1]).payload["version"] == 4
    new_leader.apply(_decode(republished[-1]))
    assert new_leader.snapshot()["plan_version"] == 4
