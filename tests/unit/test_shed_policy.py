"""The shedding controller's decisions (processors/core/cost/shed_policy.py,
processors/runtime/shed_controller.py) on Stats records made up to a known load."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from processors.core.cost.shed_policy import READ_COST, material, next_keep, target
from processors.core.cost.shed_signals import Signals, feeders, flow_queues, signals
from processors.core.plan import ShedConfig
from processors.core.query import Query
from processors.runtime.control import SHED, decode_control
from processors.runtime.shed_controller import ShedController
from topics.avro import SchemaStore, load_schema

READING = load_schema("reading")


def plan(shed: bool = True):  # type: ignore[no-untyped-def]
    q = Query("q").stream("r", topic="readings", schema=READING, timestamp="ts").into("out")
    return (q.shed(500) if shed else q).build()


def records(read: int, busy: float, backlog0: int, growth: int, latency: float, seconds: int = 4,
            agent: str = "ingest.r", start_ms: int = 10_000):  # fmt: skip
    """One worker's records, a second each: ``agent`` takes ``read`` tuples a second with its
    processor ``busy`` that share, what waits before it growing by ``growth`` a second; a sink
    (its busy time inside the agent's, as a step's result writes are) reports the latency."""
    out = []
    for t in range(seconds):
        end = start_ms + 1_000 * (t + 1)
        base = {"worker_id": "w1", "query": "q", "scope": "AGENT", "window_start_ms": end - 1_000,
                "window_end_ms": end, "tuples_out": read, "batches": 1, "backlog_bytes": 0,
                "latency_ms_avg": 0.0, "plan": "{}"}  # fmt: skip
        out.append({**base, "agent": agent, "stage": agent, "tuples_in": read,
                    "busy_ns": int(busy * 1e9), "backlog_tuples": backlog0 + growth * (t + 1),
                    "latency_ms_max": 0.0, "topic": "in", "out_topic": "out"})  # fmt: skip
        out.append({**base, "agent": "sink", "stage": "sink", "tuples_in": read, "topic": "",
                    "busy_ns": int(busy * 0.7 * 1e9), "backlog_tuples": 0,
                    "latency_ms_max": latency})  # fmt: skip
    return out


def test_a_worker_falling_behind_needs_the_pressure_on_its_bottleneck() -> None:
    s = signals(records(1_000, 0.95, 0, 2_000, 800.0, agent="mjoin"), 4_000)
    assert s is not None  # offered 3,000 a second, takes 1,000: its processor is full
    assert s.bottleneck == "w1/mjoin" and s.need == pytest.approx(3.0)
    assert s.growth_per_s == pytest.approx(2_000) and s.latency_ms == 800.0 and s.workers == 1
    assert s.backlog == 8_000 and s.read_per_s == 0.0  # no ingest agent in these records


def test_a_noisy_backlog_gives_its_trend_and_old_shares_statistics_are_left_out() -> None:
    rs = records(1_000, 0.5, 0, 0, 10.0, seconds=6)
    for r, noise in zip([r for r in rs if r["agent"] == "ingest.r"],
                        [0, 9_000, 500, 8_000, 1_000, 7_000], strict=True):  # fmt: skip
        r["backlog_tuples"] = noise
    s = signals(rs, 10_000)
    assert s is not None and abs(s.growth_per_s) < 1_500  # two endpoints would say +1,400/s
    assert signals(rs, 10_000, since_ms=15_000, min_span_ms=1_500) is None  # 1 s left: too little
    later = signals(rs, 10_000, since_ms=13_000, min_span_ms=1_500)
    assert later is not None and later.backlog == 7_000


def test_overload_sheds_to_the_target_and_more_to_drain_what_waits() -> None:
    config = ShedConfig(500, min_keep=0.05, target_utilization=0.8)
    p = plan()
    # growing by 2,000 a second from -7,700: 300 wait at the end (0.3 s of work)
    within = signals(records(1_000, 1.0, -7_700, 2_000, 100.0), 4_000)
    assert within is not None and within.backlog_s == pytest.approx(0.3)
    keep, why = next_keep(p, [], within, {"r": 1.0}, config)
    assert target(config, within) == pytest.approx(0.8 - (0.3 - 0.125) / 2.0)
    assert keep["r"] == pytest.approx(target(config, within) / 3)
    assert "w1/ingest.r needs 3.00" in why
    # over the bound and growing, nothing measurable waiting: the target is lowered
    late = Signals(3.0, "w1/mjoin", 1_000.0, 100.0, 10, 900.0, 1, 0.0)
    assert target(config, late) == pytest.approx(0.8 * 0.7)
    over = signals(records(1_000, 1.0, 0, 2_000, 900.0), 4_000)
    assert over is not None and over.backlog_s == pytest.approx(8.0)  # 8,000 waiting
    keep, _ = next_keep(p, [], over, {"r": 1.0}, config)
    assert keep["r"] == pytest.approx(0.8 * 0.5 / 3)  # 8 s of work to drain: the floor
    some = signals(records(1_000, 1.0, -7_000, 2_000, 900.0), 4_000)
    assert some is not None and some.backlog_s == pytest.approx(1.0)
    assert target(config, some) == pytest.approx(0.8 * 0.5)  # 0.8 - 0.875 / 2: the floor
    half = signals(records(1_000, 1.0, -7_500, 2_000, 900.0), 4_000)
    assert half is not None and half.backlog_s == pytest.approx(0.5)
    assert target(config, half) == pytest.approx(0.8 - (0.5 - 0.125) / 2.0)
    draining = signals(records(1_000, 1.0, 9_000, -2_000, 900.0), 4_000)
    assert draining is not None and draining.backlog == 1_000
    assert target(config, draining) == 0.8  # drains within 2 s as it is: no more cutting
    tiny = signals(records(1_000, 1.0, 0, 200_000, 900.0), 4_000)
    assert tiny is not None
    assert next_keep(p, [], tiny, {"r": 1.0}, config)[0]["r"] == 0.05  # never below min_keep


def test_raises_are_damped_and_a_light_load_lifts_at_once() -> None:
    config = ShedConfig(500)
    moderate = signals(records(1_000, 0.3, 0, 0, 600.0), 4_000)  # over the bound: not light
    assert moderate is not None
    keep, _ = next_keep(plan(), [], moderate, {"r": 0.1}, config)
    assert keep["r"] == pytest.approx(0.1 * (1 + 0.5 * (0.8 / 0.3 - 1)))  # half the gap
    low = signals(records(1_000, 0.1, 0, 0, 600.0), 4_000)
    assert low is not None
    keep, _ = next_keep(plan(), [], low, {"r": 0.1}, config)
    assert keep["r"] == pytest.approx(0.1 * 1.5 + 0.1)  # would be 0.45: capped
    light = signals(records(300, 0.1, 0, 0, 20.0), 4_000)
    assert light is not None
    keep, _ = next_keep(plan(), [], light, {"r": 0.3}, config)
    assert keep == {"r": 1.0}
    assert material(keep, {"r": 0.3}) and not material({"r": 0.51}, {"r": 0.5})


def test_the_controller_publishes_a_shed_record_when_the_shares_change() -> None:
    sent: list[tuple[bytes, bytes]] = []
    clock = [100.0]
    ctl = ShedController(plan(), lambda value, key: sent.append((value, key)), "w1",
                         clock=lambda: clock[0])  # fmt: skip
    for r in records(1_000, 1.0, 0, 2_000, 900.0, seconds=3):
        ctl.on_stats(r)
    assert not ctl.tick({"r": 1.0}) and not sent  # a worker's first 3 s are its warm-up
    clock[0] += 2.0
    for r in records(1_000, 1.0, 6_000, 2_000, 900.0, seconds=3, start_ms=13_000):
        ctl.on_stats(r)
    assert ctl.tick({"r": 1.0})
    value, key = sent[0]
    record = decode_control(value, SchemaStore())
    assert record.kind == SHED and key == b"q/DROP_RATES"
    aim = ShedConfig(500).target_utilization  # the default
    assert record.payload["keep"]["r"] == pytest.approx(aim * 0.5 / 3)  # 12 s of work wait
    assert "latency 900 ms" in record.payload["reason"]
    assert not ctl.tick({"r": 0.19})  # not again before CHECK_S
    clock[0] += 1.0
    for r in records(1_000, 0.3, 0, 0, 10.0, start_ms=int(clock[0] * 1000) - 4_000):
        ctl.on_stats(r)  # measured mostly before the change took effect
    assert not ctl.tick({"r": 0.19}) and len(sent) == 1  # too little measured since: wait
    clock[0] += 2.0
    for r in records(1_000, 0.3, 0, 0, 10.0, start_ms=int(clock[0] * 1000) - 2_000, seconds=2):
        ctl.on_stats(r)
    assert ctl.tick({"r": 0.19}) and len(sent) == 2  # 2 s under the new shares: decided
    clock[0] += 10.0  # no stats for 10 s: another worker leads now
    assert not ctl.tick({"r": 0.19}) and json.dumps(ctl.last_signals)
    with pytest.raises(AssertionError):
        ShedController(plan(shed=False), lambda v, k: None, "w1")


def join_records(seconds: int = 3, stale_backlog: int = 500) -> list[dict]:
    """Two ingest agents writing 1,500 tuples a second each to the join's two topics, the join
    taking 1,000 a second at 0.9 busy, its high-watermark backlog stale at ``stale_backlog``."""
    out = []
    for t in range(seconds):
        end = 10_000 + 1_000 * (t + 1)
        base = {"worker_id": "w1", "query": "q", "scope": "AGENT", "window_start_ms": end - 1_000,
                "window_end_ms": end, "latency_ms_max": 0.0}  # fmt: skip
        for s, topic in (("a", "q-a-internal"), ("b", "q-b-internal")):
            out.append({**base, "agent": f"ingest.{s}", "stage": "ingest", "topic": f"in.{s}",
                        "out_topic": topic, "tuples_in": 3_000, "tuples_out": 1_500,
                        "busy_ns": int(0.05e9), "backlog_tuples": 0})  # fmt: skip
        out.append({**base, "agent": "mjoin", "stage": "mjoin", "topic": "q-a-internal",
                    "out_topic": "out", "tuples_in": 1_000, "tuples_out": 5_000,
                    "busy_ns": int(0.9e9), "backlog_tuples": stale_backlog})  # fmt: skip
    return out


def test_what_waits_before_a_join_is_counted_from_the_flow_not_stale_watermarks() -> None:
    rs = join_records()
    assert feeders(rs) == {"mjoin": ["ingest.a", "ingest.b"]}
    assert flow_queues(rs, feeders(rs)) == {"mjoin": 3 * 2_000}
    s = signals(rs, 3_000)
    assert s is not None and s.bottleneck == "w1/mjoin"
    assert s.need == pytest.approx(3.0)  # offered 3,000 a second, takes 1,000: falling behind
    assert s.backlog == 6_000  # not the 500 the watermarks say
    assert s.backlog_s == pytest.approx(6_000 * 0.9 / 1_000)
    assert s.read_per_s == 6_000


def test_shares_are_scaled_alike_until_the_records_kept_meet_the_goal() -> None:
    """After Sect. 5 places the boxes, the shares are scaled alike until the records kept a
    second are the goal (streamon's hash joins cost about what they keep), each in [floor, 1]."""
    from processors.core.cost.shed_policy import _rescaled

    rates = {"a": 1_000.0, "b": 3_000.0}
    keep = _rescaled({"a": 0.5, "b": 0.25}, rates, 0.5 * (500.0 + 750.0), 0.05)
    assert keep == {"a": pytest.approx(0.25), "b": pytest.approx(0.125)}
    # a share at 1 stays there and the others take the rest
    keep = _rescaled({"a": 0.5, "b": 0.25}, rates, 3_000.0, 0.05)
    assert keep["a"] == 1.0 and rates["b"] * keep["b"] == pytest.approx(2_000.0)
    assert _rescaled({"a": 0.5, "b": 0.5}, rates, 1e9, 0.05) == {"a": 1.0, "b": 1.0}
    assert _rescaled({"a": 0.5, "b": 0.5}, rates, 0.0, 0.05) == {"a": 0.05, "b": 0.05}


def test_a_change_is_material_by_0_02_or_by_5_percent_of_a_small_share() -> None:
    assert not material({"a": 0.515}, {"a": 0.5})
    assert material({"a": 0.525}, {"a": 0.5})
    assert material({"a": 0.265}, {"a": 0.25})  # 6% of the kept rate
    assert not material({"a": 0.26}, {"a": 0.25})
    assert material({"a": 1.0}, {"a": 0.99})  # a lift always is


def test_a_worker_keeping_up_needs_its_agents_busy_shares_added_up() -> None:
    rs = records(1_000, 0.3, 100, 0, 10.0, agent="mjoin")
    rs += [{**r, "agent": "ingest.r", "busy_ns": int(0.2e9), "topic": "src"}
           for r in rs if r["agent"] == "mjoin"]  # fmt: skip
    s = signals(rs, 4_000)
    assert s is not None  # the sink's time is inside the join's turn: not added
    assert s.need == pytest.approx(0.5) and s.rising == 0.0
    keep, why = next_keep(plan(), [], s, {"r": 1.0}, ShedConfig(500))
    assert keep == {"r": 1.0} and why == "keeping up"


def test_a_rising_read_rate_is_measured() -> None:
    rs = [r for r in records(1_000, 0.3, 0, 0, 10.0) if r["agent"] == "ingest.r"]
    for k, r in enumerate(rs):
        r["agent"], r["tuples_in"] = "ingest.r", 1_000 + 200 * k
    s = signals(rs, 4_000)
    assert s is not None and s.read_per_s == pytest.approx(1_300)
    assert s.rising == pytest.approx(200 / 1_300)


def test_shares_are_held_without_clear_evidence_of_overload() -> None:
    config = ShedConfig(500)
    near = signals(records(1_000, 0.85, -240, 60, 200.0), 4_000)
    assert near is not None and not near.saturated
    # a rise with nothing waiting at the end is fetch noise; over the aim 0.8, within 15%
    assert near.need == pytest.approx(0.85)
    assert next_keep(plan(), [], near, {"r": 0.5}, config) == (
        {"r": 0.5},
        "within the bound: shares held",
    )
    late = signals(records(1_000, 0.85, -240, 60, 450.0), 4_000)
    assert late is not None  # the latency nears the bound, but no queue explains it: held
    assert next_keep(plan(), [], late, {"r": 0.5}, config)[0] == {"r": 0.5}
    queued = signals(records(1_000, 0.85, 0, 0, 450.0), 4_000)
    assert queued is not None and queued.backlog_s == pytest.approx(0.0)
    queued = replace(queued, backlog_s=0.2)  # 0.2 s of work waits: cut
    assert next_keep(plan(), [], queued, {"r": 0.5}, config)[0]["r"] < 0.5


def test_own_statistics_count_once_and_do_not_make_a_worker_the_leader() -> None:
    clock = [100.0]
    ctl = ShedController(plan(), lambda value, key: None, "w1", clock=lambda: clock[0])
    rs = records(1_000, 1.0, 0, 2_000, 900.0, seconds=6)
    for r in rs:
        ctl.on_stats(r, own=True)
    assert not ctl.leading and len(ctl.records) == 6  # after the 3 s warm-up
    for r in rs:
        ctl.on_stats(r)  # the stats topic's copies: repeats
    assert ctl.leading and len(ctl.records) == 6


def test_a_rise_is_each_workers_slope_added_up() -> None:
    rs = []
    for worker, offset in (("w1", 0), ("w2", 250)):  # intervals that do not line up
        for r in records(1_000, 0.3, 0, 0, 10.0):
            if r["agent"] == "ingest.r":
                k = (r["window_end_ms"] - 11_000) // 1_000
                rs.append({**r, "worker_id": worker, "window_start_ms": r["window_start_ms"]
                           + offset, "window_end_ms": r["window_end_ms"] + offset,
                           "tuples_in": 1_000 + 100 * k})  # fmt: skip
    s = signals(rs, 6_000)
    assert s is not None and s.workers == 2
    assert s.rising == pytest.approx(200 / s.read_per_s)


def test_between_decisions_a_rising_read_rate_is_met_at_once() -> None:
    from processors.core.cost.shed_policy import Decided, feed_forward

    config = ShedConfig(500)
    last = Decided(rate=10_000.0, need=0.9, aim=0.8)
    assert feed_forward({"r": 0.5}, 10_800.0, last, config) is None  # under 10% more
    keep, decided, why = feed_forward({"r": 0.5}, 12_500.0, last, config)
    # 0.5 * 10k / 12.5k, less the reading of 2.5k more records a second (READ_COST each)
    assert keep == {"r": pytest.approx(0.4 - READ_COST * 2_500 / 12_500)}
    assert "cost held" in why
    assert decided == Decided(12_500.0, 0.9, 0.8)
    # not shedding: 0.6 grown by 1.5 is 0.9, within 15% of the aim; by 2 it is 1.2: start
    calm = Decided(rate=10_000.0, need=0.6, aim=0.8)
    assert feed_forward({"r": 1.0}, 11_500.0, calm, config) is None  # not shedding: 20%
    assert feed_forward({"r": 1.0}, 15_000.0, calm, config) is None
    keep, decided, _ = feed_forward({"r": 1.0}, 20_000.0, calm, config)
    assert keep == {"r": pytest.approx(0.8 / 1.2)} and decided.need == 0.8
    assert feed_forward({"r": 0.5}, 12_500.0, Decided(0.0, 0.9, 0.8), config) is None


def test_between_decisions_a_falling_read_rate_gives_the_shares_back() -> None:
    """While shedding, a fall of the offered rate raises every share by its inverse (each
    input's kept rate held, plus the reading freed), up to a lift; not shedding, a fall
    changes nothing."""
    from processors.core.cost.shed_policy import Decided, feed_forward

    config = ShedConfig(500)
    last = Decided(rate=20_000.0, need=0.8, aim=0.8)
    current = {"a": 0.3, "b": 0.2}
    assert feed_forward(current, 18_500.0, last, config) is None  # under 10% less
    keep, decided, why = feed_forward(current, 15_000.0, last, config)
    freed = READ_COST * 5_000 / 15_000  # 5k fewer records a second to read
    assert keep == {"a": pytest.approx(0.4 + freed), "b": pytest.approx(0.8 / 3 + freed)}
    assert decided == Decided(15_000.0, 0.8, 0.8) and "cost held" in why
    keep, _, _ = feed_forward({"a": 0.5, "b": 0.9}, 5_000.0, last, config)
    assert keep == {"a": 1.0, "b": 1.0}  # capped at 1: a lift
    assert feed_forward({"a": 1.0, "b": 1.0}, 5_000.0, last, config) is None


def test_the_controller_cuts_between_decisions_when_its_boxes_read_more() -> None:
    sent: list[tuple[bytes, bytes]] = []
    clock, read = [100.0], [0]
    ctl = ShedController(plan(), lambda value, key: sent.append((value, key)), "w1",
                         clock=lambda: clock[0], reads=lambda: read[0])  # fmt: skip
    for r in records(1_000, 1.0, 0, 2_000, 900.0, seconds=6):
        ctl.on_stats(r)
    for _ in range(6):  # 1,000 records a second read
        clock[0] += 0.2
        read[0] += 200
        ctl.tick({"r": 1.0})
    assert len(sent) == 1  # the decision on the statistics: shed
    shares = decode_control(sent[0][0], SchemaStore()).payload["keep"]["r"]
    current = shares
    for _ in range(4):  # then 2,000 a second, within the second before the next decision
        clock[0] += 0.2
        read[0] += 400
        ctl.tick({"r": current})  # the boxes apply each change as it is published
        current = decode_control(sent[-1][0], SchemaStore()).payload["keep"]["r"]
    # the rate over the last second rose 10% or more (SHEDDING_RISE) at most of the polls
    fast = [decode_control(v, SchemaStore()).payload for v, _ in sent[1:]]
    assert len(fast) >= 3 and all("cost held" in f["reason"] for f in fast)
    cuts = [f["keep"]["r"] for f in fast]
    assert [shares, *cuts] == sorted([shares, *cuts], reverse=True)
    # the cuts compound to the kept rate held (shares * 1,000/1,800) less the reading of the
    # 800 more records a second
    assert cuts[-1] == pytest.approx(shares * 1_000 / 1_800 - READ_COST * 800 / 1_800)
    # they hold the load the statistics measured: those stay valid, and the next decision
    # is made on them (a change of the load would wait for a second of new ones)
    since = ctl._since_ms  # still that of the decision on the statistics
    assert since < clock[0] * 1000
    for r in records(1_800, 0.5, 0, 0, 100.0, seconds=2, start_ms=since):
        ctl.on_stats(r)
    ctl.last_signals = None
    clock[0] += 0.6
    ctl.tick({"r": current})
    assert ctl.last_signals is not None


def test_shares_held_by_a_decision_stay_meant_for_the_rate_they_were_set_at() -> None:
    """A decision that holds the shares does not move the offered rate they are meant for: in a
    climb, decisions a second apart would otherwise each take the newer rate as the base,
    and a rise of 5% a second would never reach feed_forward's 10% (the kept rate would
    climb unchecked until the statistics showed the overload)."""
    sent: list[tuple[bytes, bytes]] = []
    clock, read = [100.0], [0]
    ctl = ShedController(plan(), lambda value, key: sent.append((value, key)), "w1",
                         clock=lambda: clock[0], reads=lambda: read[0])  # fmt: skip
    for r in records(1_000, 0.85, 0, 0, 100.0, seconds=6):  # within 15% of the aim: held
        ctl.on_stats(r)
    shedding = {"r": 0.5}
    for per_s in (1_000, 1_000, 1_050, 1_250):  # a second each, five ticks a second
        for _ in range(5):
            clock[0] += 0.2
            read[0] += per_s // 5
            ctl.tick(shedding)
    assert sent  # held twice, then cut once 10% over the 1,000 they were set at
    fast = decode_control(sent[0][0], SchemaStore()).payload
    assert "cost held" in fast["reason"] and "offered 1000/s ->" in fast["reason"]
    # meant for 1,050 (the held decision's rate) they would be cut only at 1,155, to 0.45
    assert fast["keep"]["r"] < 0.45


def test_a_fall_of_the_read_rate_raises_the_shares_only_once_it_lasts() -> None:
    """Cut fast, raise slowly: a worker that falls behind reads less for a moment while as
    much is offered; the feed-forward raises the shares only after FALL_CONFIRM_POLLS polls in
    a row saw the fall (a rise is acted on at the first)."""
    from processors.runtime.shed_controller import FALL_CONFIRM_POLLS

    sent: list[tuple[bytes, bytes]] = []
    clock = [100.0]
    ctl = ShedController(plan(), lambda value, key: sent.append((value, key)), "w1",
                         clock=lambda: clock[0])  # fmt: skip
    for r in records(1_000, 0.85, 0, 0, 100.0, seconds=6):  # held by the decisions
        ctl.on_stats(r)
    rates = iter([2_000.0] * 2 + [1_500.0] * (FALL_CONFIRM_POLLS - 1) + [2_000.0] * 3
                 + [1_500.0] * FALL_CONFIRM_POLLS)  # fmt: skip
    ctl.offered_rate = lambda: next(rates)  # type: ignore[method-assign]
    shedding = {"r": 0.5}
    for _ in range(2 + FALL_CONFIRM_POLLS - 1 + 3 + FALL_CONFIRM_POLLS - 1):
        clock[0] += 0.1  # polls within one decision's second
        ctl.tick(shedding)
    assert not sent  # a dip shorter than the confirmation raised nothing
    clock[0] += 0.1
    ctl.tick(shedding)
    (raised,) = [decode_control(v, SchemaStore()).payload for v, _ in sent]
    assert raised["keep"]["r"] > 0.5 and "cost held" in raised["reason"]


def test_a_clear_fall_of_the_read_rate_scales_the_statistics_need_down() -> None:
    """In a falling load the statistics' window (3 s, a second or two old) overstates the
    need: at the same shares it is scaled by the offered rate now over the window's, once the
    fall is clear (10%) and only while nothing queues (a worker falling behind reads less
    while as much is offered)."""
    from processors.core.cost.shed_policy import at_the_rate_now

    config = ShedConfig(500)
    s = Signals(need=0.9, bottleneck="w/mjoin", read_per_s=20_000.0, growth_per_s=0.0,
                backlog=100, latency_ms=200.0, workers=1, backlog_s=0.01)  # fmt: skip
    assert at_the_rate_now(s, 15_000.0, 20_000.0, config).need == pytest.approx(0.675)
    assert at_the_rate_now(s, 19_000.0, 20_000.0, config) == s  # 5%: noise
    assert at_the_rate_now(s, 25_000.0, 20_000.0, config) == s  # a rise: not here
    assert at_the_rate_now(s, 15_000.0, 0.0, config) == s  # not known yet
    assert at_the_rate_now(replace(s, saturated=True), 15_000.0, 20_000.0, config).need == 0.9
    queued = replace(s, backlog_s=0.2)  # over a quarter of the 500 ms bound waits
    assert at_the_rate_now(queued, 15_000.0, 20_000.0, config).need == 0.9


def test_a_first_cut_no_rise_explains_waits_for_the_next_decision() -> None:
    """A worker that stalls for a moment at a steady offered rate measures like an overloaded
    one for a window: the first cut waits for the next decision, which a stall that has passed
    does not confirm; one that lasts is cut a decision later."""
    sent: list[tuple[bytes, bytes]] = []
    clock = [100.0]
    ctl = ShedController(plan(), lambda value, key: sent.append((value, key)), "w1",
                         clock=lambda: clock[0])  # fmt: skip
    for r in records(1_000, 1.0, 0, 50, 450.0, seconds=6):  # 0.3 s of work waits
        ctl.on_stats(r)
    assert not ctl.tick({"r": 1.0}) and not sent  # not yet: a stall or an overload?
    clock[0] += 1.0
    for r in records(1_000, 0.3, 0, 0, 20.0, seconds=3, start_ms=16_000):
        ctl.on_stats(r)
    assert not ctl.tick({"r": 1.0}) and not sent  # it passed: nothing was cut
    clock[0] += 1.0
    for r in records(1_000, 1.0, 0, 50, 450.0, seconds=4, start_ms=19_000):
        ctl.on_stats(r)
    assert not ctl.tick({"r": 1.0}) and not sent
    clock[0] += 1.0
    assert ctl.tick({"r": 1.0}) and len(sent) == 1  # the same a second later: confirmed
    assert decode_control(sent[0][0], SchemaStore()).payload["keep"]["r"] < 1.0
