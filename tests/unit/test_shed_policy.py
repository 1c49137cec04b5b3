"""The shedding controller's decisions (processors/core/cost/shed_policy.py,
processors/runtime/shed_controller.py) on Stats records made up to a known load."""

from __future__ import annotations

import json

import pytest

from processors.core.cost.shed_policy import material, next_keep, signals, target
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
                    "latency_ms_max": 0.0})  # fmt: skip
        out.append({**base, "agent": "sink", "stage": "sink", "tuples_in": read,
                    "busy_ns": int(busy * 0.7 * 1e9), "backlog_tuples": 0,
                    "latency_ms_max": latency})  # fmt: skip
    return out


def test_the_bottleneck_agents_need_is_measured_not_the_sum_of_overlapping_ones() -> None:
    s = signals(records(1_000, 0.95, 0, 2_000, 800.0, agent="mjoin"), 4_000)
    assert s is not None
    assert s.bottleneck == "w1/mjoin" and s.need == pytest.approx(0.95 * 3)
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


def test_overload_sheds_to_the_target_and_more_while_over_the_bound() -> None:
    config = ShedConfig(500, min_keep=0.05, target_utilization=0.8)
    p = plan()
    within = signals(records(1_000, 1.0, 0, 2_000, 100.0), 4_000)
    assert within is not None
    keep, why = next_keep(p, [], within, {"r": 1.0}, config)
    assert keep["r"] == pytest.approx(0.8 / 3) and "w1/ingest.r needs 3.00" in why
    over = signals(records(1_000, 1.0, 0, 2_000, 900.0), 4_000)
    assert over is not None
    keep, _ = next_keep(p, [], over, {"r": 1.0}, config)
    assert keep["r"] == pytest.approx(0.8 * 0.7 / 3)  # the backlog must drain
    draining = signals(records(1_000, 1.0, 9_000, -2_000, 900.0), 4_000)
    assert draining is not None and draining.backlog == 1_000
    assert target(config, draining) == 0.8  # drains within the bound: no more cutting
    tiny = signals(records(1_000, 1.0, 0, 200_000, 900.0), 4_000)
    assert tiny is not None
    assert next_keep(p, [], tiny, {"r": 1.0}, config)[0]["r"] == 0.05  # never below min_keep


def test_raises_are_damped_and_a_light_load_lifts_at_once() -> None:
    config = ShedConfig(500)
    moderate = signals(records(1_000, 0.3, 0, 0, 600.0), 4_000)  # over the bound: not light
    assert moderate is not None
    keep, _ = next_keep(plan(), [], moderate, {"r": 0.1}, config)
    assert keep["r"] == pytest.approx(0.1 * 1.5 + 0.1)  # would be 0.27 at once: damped
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
    assert record.payload["keep"]["r"] == pytest.approx(0.8 * 0.7 / 3)
    assert "latency 900 ms" in record.payload["reason"]
    assert not ctl.tick({"r": 0.19})  # not again before CHECK_S
    clock[0] += 2.0
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
