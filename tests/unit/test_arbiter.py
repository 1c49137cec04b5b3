"""The arbiter (processors/runtime/arbiter.py): one turn at a time, in the policy's order.

Plain asyncio, no Faust: agents are coroutines that ask for turns the way the runtime's agents
do, and the tests record who held the processor when.
"""

from __future__ import annotations

import asyncio

import pytest

from processors.core.scheduling.plan import SchedulingPlan
from processors.core.scheduling.policies import make_policy
from processors.runtime.arbiter import MAX_DEFERRALS, Arbiter
from processors.runtime.context import tuple_runs


def _plan() -> SchedulingPlan:
    # one path a -> b -> c: b is fast and selective (Chain and Greedy rank it first)
    plan = SchedulingPlan(
        paths={"p": ["a", "b", "c"]},
        stats={"a": (4.0, 1.0), "b": (1.0, 0.1), "c": (10.0, 0.0)},
    )
    plan.validate()
    return plan


async def _agent(arbiter: Arbiter, op: str, arrivals: list[float], log: list[str]) -> None:
    for arrival in arrivals:
        async with arbiter.turn(op, arrival):
            assert arbiter.snapshot()["holder"] == (op if arbiter.enabled else None)
            log.append(op)
            await asyncio.sleep(0)  # a turn may yield; nobody else may start meanwhile


async def _run(arbiter: Arbiter, work: dict[str, list[float]]) -> list[str]:
    log: list[str] = []
    await asyncio.gather(*(_agent(arbiter, op, times, log) for op, times in work.items()))
    return log


def test_without_a_policy_the_oldest_head_goes_first() -> None:
    arbiter = Arbiter()
    log = asyncio.run(_run(arbiter, {"a": [3.0, 5.0], "b": [1.0, 4.0], "c": [2.0]}))
    assert log == ["b", "c", "a", "b", "a"]
    assert arbiter.stats.decisions == 5
    assert arbiter.stats.contested >= 3


def test_chain_grants_by_priority_while_several_agents_wait() -> None:
    arbiter = Arbiter()
    policy = make_policy("chain", _plan())
    arbiter.install(policy, policy.describe())
    prio = policy.priorities()
    assert prio["a"] == prio["b"] > prio["c"]  # a and b form the first chain
    # everyone waits from the start: the first chain (a, b) drains before c runs at all
    log = asyncio.run(_run(arbiter, {"c": [0.0, 0.1], "a": [1.0, 2.0], "b": [3.0, 4.0]}))
    assert log == ["a", "a", "b", "b", "c", "c"]


def test_greedy_follows_its_own_ranking() -> None:
    arbiter = Arbiter()
    policy = make_policy("greedy", _plan())
    arbiter.install(policy, policy.describe())
    log = asyncio.run(_run(arbiter, {"a": [0.0], "b": [5.0], "c": [1.0]}))
    # (1 - s) / t: b 0.9, c 0.1, a 0
    assert log == ["b", "c", "a"]


def test_one_turn_at_a_time_even_when_turns_yield() -> None:
    arbiter = Arbiter()
    holders: list[int] = []

    async def agent(op: str) -> None:
        for i in range(20):
            async with arbiter.turn(op, float(i)):
                holders.append(1)
                assert len(holders) == 1
                await asyncio.sleep(0)
                await asyncio.sleep(0)
                holders.pop()

    async def main() -> None:
        await asyncio.gather(*(agent(op) for op in "abcd"))

    asyncio.run(main())
    assert arbiter.stats.decisions == 80


def test_decisions_wait_for_the_delivery_round_to_finish() -> None:
    """While the consumer hands out fetched records (``busy``), a decision waits, so that an
    agent receiving its input in the same round competes with one that was already waiting."""
    busy = {"on": True}
    arbiter = Arbiter(busy=lambda: busy["on"])
    policy = make_policy("chain", _plan())
    arbiter.install(policy, policy.describe())
    log: list[str] = []

    async def main() -> None:
        first = asyncio.ensure_future(_agent(arbiter, "c", [0.0], log))  # low priority, first
        for _ in range(5):
            await asyncio.sleep(0)
        assert log == []  # still delivering: nobody granted yet
        second = asyncio.ensure_future(_agent(arbiter, "b", [1.0], log))  # arrives in the round
        for _ in range(5):
            await asyncio.sleep(0)
        busy["on"] = False
        await asyncio.gather(first, second)

    asyncio.run(main())
    assert log == ["b", "c"]  # Chain's choice, not arrival order
    assert arbiter.stats.deferrals > 0


def test_a_delivery_that_never_ends_does_not_stop_the_agents() -> None:
    arbiter = Arbiter(busy=lambda: True)
    log = asyncio.run(_run(arbiter, {"a": [0.0, 1.0]}))
    assert log == ["a", "a"]
    assert arbiter.stats.deferrals == 2 * MAX_DEFERRALS


def test_a_failing_policy_falls_back_to_fifo_and_is_counted() -> None:
    class Broken:
        name = "broken"

        def choose(self, now: float, ready: list) -> str:
            raise RuntimeError("bug")

    arbiter = Arbiter()
    arbiter.install(Broken(), {"policy": "broken"})
    log = asyncio.run(_run(arbiter, {"a": [2.0], "b": [1.0]}))
    assert log == ["b", "a"]
    assert arbiter.stats.policy_errors == 1


def test_a_waiting_agent_that_is_cancelled_leaves_no_trace() -> None:
    arbiter = Arbiter()

    async def main() -> list[str]:
        log: list[str] = []
        holder_may_go = asyncio.Event()

        async def holder() -> None:
            async with arbiter.turn("a", 0.0):
                log.append("a")
                await holder_may_go.wait()

        first = asyncio.ensure_future(holder())
        await asyncio.sleep(0.01)
        waiting = asyncio.ensure_future(_agent(arbiter, "b", [1.0], log))
        await asyncio.sleep(0.01)
        assert arbiter.snapshot()["waiting"] == ["b"]
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        holder_may_go.set()
        await first
        await _agent(arbiter, "c", [2.0], log)
        return log

    assert asyncio.run(main()) == ["a", "c"]
    assert arbiter.snapshot()["waiting"] == []


def test_disabled_arbiter_lets_everyone_run() -> None:
    arbiter = Arbiter(enabled=False)
    log = asyncio.run(_run(arbiter, {"a": [2.0], "b": [1.0]}))
    assert sorted(log) == ["a", "b"]
    assert arbiter.stats.decisions == 0


def test_snapshot_reports_decision_costs_and_waits() -> None:
    arbiter = Arbiter()
    asyncio.run(_run(arbiter, {"a": [0.0, 1.0], "b": [0.5]}))
    snap = arbiter.snapshot()
    assert snap["decisions"] == 3
    assert snap["decision_ns_avg"] > 0
    assert snap["decision_ns_max"] >= snap["decision_ns_avg"]
    assert set(snap["agents"]) == {"a", "b"}
    assert snap["agents"]["a"]["grants"] == 2


def test_tuple_runs_groups_blocks_into_turns_in_order() -> None:
    """Several delivered blocks share a turn up to its tuples; a larger one is a turn alone."""
    sizes = [3, 3, 5, 20, 1, 2, 8]
    runs = tuple_runs([list(range(n)) for n in sizes], 8)
    assert [[len(item) for item in run] for run in runs] == [[3, 3], [5], [20], [1, 2], [8]]
    assert [len(i) for run in runs for i in run] == sizes  # nothing lost, order kept
    assert tuple_runs([], 8) == []
