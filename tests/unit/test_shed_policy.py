"""The shedding controller's decisions (processors/core/cost/shed_policy.py,
processors/runtime/shed_controller.py) on Stats records made up to a known load."""

from __future__ import annotations

import json

import pytest

from processors.core.cost.shed_policy import material, next_keep, signals
from processors.core.plan import ShedConfig
from processors.core.query import Query
from processors.runtime.control import SHED, decode_control
from processors.runtime.shed_controller import ShedController
from topics.avro import SchemaStore, load_schema

READING = load_schema("reading")


def plan(shed: bool = True):  # type: ignore[no-untyped-def]
    q = Query("q").stream("r", topic="readings", schema=READING, timestamp="ts").into("out")
    return (q.shed(500) if shed else q).build()


def records(read: int, busy: float, backlog0: int, growth: int, latency: float, seconds: int = 4):
    """One worker's ingest and sink records, a second each: ``read`` records read a second,
    the processor ``busy`` of each second, the backlog growing by ``growth`` a second."""
    out = []
    for t in range(seconds):
        end = 10_000 + 1_000 * (t + 1)
        base = {"worker_id": "w1", "query": "q", "scope": "AGENT", "window_start_ms": end - 1_000,
                "window_end_ms": end, "tuples_out": read, "batches": 1, "backlog_bytes": 0,
                "latency_ms_avg": 0.0, "plan": "{}"}  # fmt: skip
        out.append({**base, "agent": "ingest.r", "stage": "ingest.r", "tuples_in": read,
                    "busy_ns": int(busy * 1e9), "backlog_tuples": backlog0 + growth * (t + 1),
                    "latency_ms_max": 0.0})  # fmt: skip
        out.append({**base, "agent": "sink", "stage": "sink", "tuples_in": read, "busy_ns": 0,
                    "backlog_tuples": 0, "latency_ms_max": latency})  # fmt: skip
    return out


def test_the_load_is_measured_from_the_records() -> None:
    s = signals(records(1_000, 0.95, 0, 2_000, 800.0), 4_000)
    assert s is not None
    assert s.read_per_s == pytest.approx(1_000) and s.growth_per_s == pytest.approx(2_000)
    assert s.busy == pytest.approx(0.95) and s.latency_ms == 800.0 and s.workers == 1
    assert s.need == pytest.approx(0.95 * 3)


def test_overload_sheds_to_the_target_and_more_while_over_the_bound() -> None:
    config = ShedConfig(500, min_keep=0.05, target_utilization=0.8)
    p = plan()
    within = signals(records(1_000, 1.0, 0, 2_000, 100.0), 4_000)
    assert within is not None
    keep, why = next_keep(p, [], within, {"r": 1.0}, config)
    assert keep["r"] == pytest.approx(0.8 / 3) and "need 3.00" in why
    over = signals(records(1_000, 1.0, 0, 2_000, 900.0), 4_000)
    assert over is not None
    keep, _ = next_keep(p, [], over, {"r": 1.0}, config)
    assert keep["r"] == pytest.approx(0.8 * 0.7 / 3)  # the backlog must drain
    tiny = signals(records(1_000, 1.0, 0, 200_000, 900.0), 4_000)
    assert tiny is not None
    assert next_keep(p, [], tiny, {"r": 1.0}, config)[0]["r"] == 0.05  # never below min_keep


def test_the_boxes_are_lifted_when_the_load_falls() -> None:
    config = ShedConfig(500)
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
    for r in records(1_000, 1.0, 0, 2_000, 900.0):
        ctl.on_stats(r)
    assert ctl.tick({"r": 1.0})
    value, key = sent[0]
    record = decode_control(value, SchemaStore())
    assert record.kind == SHED and key == b"q/DROP_RATES"
    assert record.payload["keep"]["r"] == pytest.approx(0.8 * 0.7 / 3)
    assert "latency 900 ms" in record.payload["reason"]
    assert not ctl.tick({"r": 0.19})  # not again before CHECK_S
    clock[0] += 10.0  # no stats for 10 s: another worker leads now
    assert not ctl.tick({"r": 0.19}) and json.dumps(ctl.last_signals)
    with pytest.raises(AssertionError):
        ShedController(plan(shed=False), lambda v, k: None, "w1")
