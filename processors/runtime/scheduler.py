"""The scheduler agent, and how a worker applies what it decides.

Each query has one active scheduler: the Faust agent on the stats topic of the worker that the
consumer group gave the topic's (single) partition. It keeps the Stats records of the query's
agents over a recent window, turns them into a scheduling plan (the operator paths of the query
with each operator's measured time per tuple and selectivity:
:mod:`processors.core.scheduling.measured`) and publishes the plan with the policy in force on
the control topic every few seconds. Every worker (the scheduler's included) reads the control
topic and builds the policy from the plan for its arbiter, so that all workers of a query
schedule alike. A user changes the policy at run time with a POLICY record (``streamon
control policy``): arbiters apply it at once to the plan they have, and the scheduler publishes
with it from then on.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any, Protocol

from processors.core.scheduling.config import SchedulingConfig
from processors.core.scheduling.measured import StatsWindow, Totals, measured_plan
from processors.core.scheduling.plan import SchedulingPlan
from processors.core.scheduling.policies import make_policy
from processors.runtime.arbiter import Arbiter
from processors.runtime.change_log import ChangeLog
from processors.runtime.control import (
    POLICY,
    PRIORITIES,
    RESET_TO_QUERY,
    ControlRecord,
    encode_control,
)
from processors.runtime.kafka_security import KafkaSecurity

log = logging.getLogger(__name__)

#: how often the active scheduler re-measures; it publishes when the plan changed materially
PUBLISH_EVERY_S = 2.0
#: ... and at least this often anyway (measured times drift; Chain-Flush's p_q follows them)
HEARTBEAT_S = 10.0
#: a change of an operator's time per tuple or selectivity by more than this share is material
MATERIAL_CHANGE = 0.25
#: a new priority ranking is material only where an operator now beats one ranked above it by
#: more than this share (A-Greedy's thrash margin, 1 - alpha, used the same way): operators of
#: nearly equal priority, like the pipelines of symmetric inputs, would otherwise swap places
#: on measurement noise at every check, and every swap is published and reported
RANKING_MARGIN = 0.1
#: a worker stops considering itself the scheduler when no stats arrived for this long
LEADERSHIP_TIMEOUT_S = 5.0


def policy_settings(config: SchedulingConfig) -> dict[str, Any]:
    """Settings of :func:`make_policy` from a query's configuration (thresholds travel in the
    plan; Mixed's gamma is in tuples consumed per second of processing)."""
    return {"gamma": config.gamma} if config.policy == "mixed" else {}


def plan_to_json(plan: SchedulingPlan) -> dict[str, Any]:
    return {
        "paths": plan.paths,
        "stats": {op: list(ts) for op, ts in plan.stats.items()},
        "query_of": plan.query_of,
        "latency_threshold": plan.latency_threshold,
        "remaining_time": plan.remaining_time,
    }


def plan_from_json(data: dict[str, Any]) -> SchedulingPlan:
    plan = SchedulingPlan(
        paths={p: list(ops) for p, ops in data["paths"].items()},
        stats={op: (float(t), float(s)) for op, (t, s) in data["stats"].items()},
        query_of=dict(data.get("query_of", {})),
        latency_threshold={q: float(r) for q, r in data.get("latency_threshold", {}).items()},
        remaining_time={op: float(p) for op, p in data.get("remaining_time", {}).items()},
    )
    plan.validate()
    return plan


class Scheduling:
    """One worker's side of scheduling: the arbiter's policy, and the scheduler's state for the
    times this worker is the one receiving the query's statistics."""

    def __init__(
        self,
        query: str,
        paths: dict[str, list[str]],
        config: SchedulingConfig,
        arbiter: Arbiter,
        publish: Callable[[bytes], None],
        worker_id: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.query = query
        self.paths = paths
        self.config = config
        self.query_config = config  # what the query file says, for a POLICY record's reset
        self.arbiter = arbiter
        self._publish = publish
        self.worker_id = worker_id
        self.clock = clock
        self.window = StatsWindow(config.stats_window_s * 1000)
        self.plan: SchedulingPlan | None = None  # the plan the arbiter's policy is built on
        self.plan_version = 0
        self.published: SchedulingPlan | None = None
        self.seq = 0
        self._last_stats = float("-inf")
        self._last_publish = float("-inf")
        self._last_check = float("-inf")
        self._force_publish = False
        self._last_ranking: list[list[str]] | None = None
        self.changes = ChangeLog()
        arbiter.enabled = config.policy != "off"

    # -- the scheduler ------------------------------------------------------------------------
    def on_stats(self, record: dict[str, Any]) -> None:
        """A Stats record from any worker; only this query's agents count."""
        if record.get("query") != self.query or record.get("scope") != "AGENT":
            return
        self._last_stats = self.clock()
        totals = Totals(
            int(record["tuples_in"]), int(record["tuples_out"]),
            int(record["busy_ns"]), int(record["batches"]),
        )  # fmt: skip
        self.window.add(int(record["window_end_ms"]), record["agent"], totals)

    @property
    def leading(self) -> bool:
        return self.clock() - self._last_stats < LEADERSHIP_TIMEOUT_S

    def tick(self) -> bool:
        """Publish the measured plan if this worker is the scheduler and it is time."""
        now = self.clock()
        if not self.leading or now - self._last_check < PUBLISH_EVERY_S:
            return False
        totals = self.window.totals(int(now * 1000))
        try:
            plan = measured_plan(self.query, self.paths, totals, self.config, self.published)
        except ValueError as exc:  # statistics that make no plan: say so, try again later
            log.warning("scheduler for %s: no plan from the statistics: %s", self.query, exc)
            return False
        self._last_check = now
        due = self._force_publish or self.published is None
        due = due or now - self._last_publish >= HEARTBEAT_S
        if not due and not self._material(plan):
            return False
        self.published = plan
        # a new leader goes on from the last version any scheduler of the query published
        self.seq = max(self.seq, self.plan_version) + 1
        payload = {
            "policy": self.config.policy,
            "config": self.config.to_json(),
            "plan": plan_to_json(plan),
            "version": self.seq,
        }
        self._publish(encode_control(PRIORITIES, self.query, payload, self.worker_id, self.seq))
        self._last_publish = now
        self._force_publish = False
        return True

    def _material(self, plan: SchedulingPlan) -> bool:
        """Whether ``plan`` differs enough from the published one to publish it now: another
        priority ranking under the policy in force, or an operator's figures moved a lot."""
        old = self.published
        if old is None or old.paths != plan.paths:
            return True
        for op, (t, s) in plan.stats.items():
            t0, s0 = old.stats.get(op, (0.0, 0.0))
            if abs(t - t0) > MATERIAL_CHANGE * max(t0, 1e-12):
                return True
            if abs(s - s0) > MATERIAL_CHANGE * max(s0, 1e-3):
                return True
        if self.config.policy == "off":
            return False
        settings = policy_settings(self.config)
        before = make_policy(self.config.policy, old, **settings).priorities()
        after = make_policy(self.config.policy, plan, **settings).priorities()
        return _overtaken(before, after)

    # -- every worker ---------------------------------------------------------------------------
    def apply(self, record: ControlRecord) -> None:
        """A control record for this query: a new plan, or a new policy."""
        if record.kind == PRIORITIES:
            self.config = SchedulingConfig.from_mapping(record.payload["config"])
            self.plan = plan_from_json(record.payload["plan"])
            self.plan_version = int(record.payload.get("version", record.seq))
        elif record.kind == POLICY:
            previous = self.config
            if record.payload.get(RESET_TO_QUERY):  # back to the query file's schedule()
                self.config = self.query_config
            else:
                self.config = SchedulingConfig.from_mapping(
                    {**self.config.to_json(), **record.payload}
                )
            self._force_publish = True  # the scheduler's next plan carries the new settings
            self.window = StatsWindow(self.config.stats_window_s * 1000)
            log.info("query %s: scheduling policy is now %s (%s)", self.query,
                     self.config.policy, record.issuer or "unknown issuer")  # fmt: skip
            self.changes.record({
                "kind": "policy", "time_ms": int(self.clock() * 1000),
                "from": previous.to_json(), "to": self.config.to_json(),
                "issuer": record.issuer,
            })  # fmt: skip
        else:
            return
        self._install()

    def _install(self) -> None:
        config = self.config
        self.arbiter.enabled = config.policy != "off"
        if self.plan is None or config.policy == "off":
            self.arbiter.install(None, {"policy": config.policy, "plan_version": None})
            return
        policy = make_policy(config.policy, self.plan, **policy_settings(config))
        description = {**policy.describe(), "config": config.to_json(),
                       "plan_version": self.plan_version}  # fmt: skip
        self.arbiter.install(policy, description)
        self._note_ranking(policy.priorities())

    def _note_ranking(self, priorities: dict[str, float]) -> None:
        """Log and remember when the priority order of the agents changes."""
        ranking = _ranking(priorities)
        if ranking == self._last_ranking:
            return
        change = {
            "kind": "priorities",
            "time_ms": int(self.clock() * 1000),
            "policy": self.config.policy,
            "from": self._last_ranking,
            "to": ranking,
            "plan_version": self.plan_version,
        }
        self._last_ranking = ranking
        self.changes.record(change)
        log.info("query %s: %s priorities now %s", self.query, self.config.policy,
                 " > ".join("=".join(level) for level in ranking))  # fmt: skip

    def snapshot(self) -> dict[str, Any]:
        """For the status page: the policy in force, the plan it runs on, the arbiter."""
        return {
            "policy": self.config.policy,
            "config": self.config.to_json(),
            "scheduler_here": self.leading,
            "plan_version": self.plan_version,
            "plan": None if self.plan is None else plan_to_json(self.plan),
            "changes": self.changes.entries(),
            "arbiter": self.arbiter.snapshot(),
        }

    def events(self) -> list[dict[str, Any]]:
        """Priority changes since the last call (for the stats topic), as JSON-able dicts."""
        return self.changes.unreported()


def _clearly_above(x: float, y: float, margin: float) -> bool:
    if not x > y:
        return False
    if math.isinf(x) or math.isinf(y):
        return True
    return x - y > margin * max(abs(x), abs(y))


def _overtaken(
    before: dict[str, float], after: dict[str, float], margin: float = RANKING_MARGIN
) -> bool:
    """Whether some operator is now clearly above (by ``margin``) one that was not below it."""
    if set(before) != set(after):
        return True
    return any(
        _clearly_above(after[b], after[a], margin)
        for a in after
        for b in after
        if a != b and before[a] >= before[b]
    )


def _ranking(priorities: dict[str, float]) -> list[list[str]]:
    """Operators grouped by priority, highest first (ties grouped, names sorted)."""
    levels = sorted(set(priorities.values()), reverse=True)
    return [sorted(op for op, p in priorities.items() if p == v) for v in levels]


class Party(Protocol):
    """What the stats topic and the control topic drive on a worker: the scheduling, and the
    shedding (:mod:`processors.runtime.shedding`)."""

    query: str

    def on_stats(self, record: dict[str, Any]) -> None: ...

    def apply(self, record: ControlRecord) -> None: ...

    def tick(self) -> bool: ...

    def events(self) -> list[dict[str, Any]]: ...


def add_scheduling_agents(
    app: Any,
    board: Any,
    scheduling: Scheduling,
    bootstrap: str,
    stats_topic: str,
    control_topic: str,
    poll_every_s: float = 0.2,
    security: KafkaSecurity | None = None,
    others: tuple[Party, ...] = (),
) -> None:
    """The scheduler agent (bulk reader of the stats topic), the control topic reader and the
    timer that drives them, for ``scheduling`` and the ``others`` (the shedding); their changes
    go to the stats topic as a "scheduler" agent's events."""
    parties: list[Party] = [scheduling, *others]

    def apply(record: ControlRecord) -> None:
        for party in parties:
            party.apply(record)

    from processors.runtime.control import ControlReader
    from processors.runtime.record_block import RecordBlock
    from topics.avro import SchemaStore, decode_single_object, load_schema

    schema, store = load_schema("stats"), SchemaStore()
    reader: list[ControlReader] = []

    async def scheduler(blocks: Any) -> None:
        async for block in blocks:
            if not isinstance(block, RecordBlock):
                continue
            for value in block.values:
                try:
                    record = decode_single_object(value or b"", schema, store)
                except Exception:  # a stats record we cannot read is not worth a dead letter
                    continue
                for party in parties:
                    party.on_stats(record)

    app.agent(app.topic(stats_topic, value_serializer="raw", key_serializer="raw"),
              name="scheduler")(scheduler)  # fmt: skip

    @app.task
    async def open_control_reader() -> None:
        import asyncio

        reader.append(
            await asyncio.to_thread(
                ControlReader,
                bootstrap,
                control_topic,
                scheduling.query,
                apply,
                security,
            )
        )

    @app.timer(poll_every_s)
    async def drive_scheduling() -> None:
        if reader:
            reader[0].poll()
        for party in parties:
            party.tick()

    stats = board.agent("scheduler", "scheduler", plan=lambda: {"policy": scheduling.config.policy})
    stats.new_events = lambda: [e for party in parties for e in party.events()]
