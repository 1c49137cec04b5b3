"""A single-processor simulator of operator paths with queues (Babcock et al., Sect. 2-4.3).

Model and accounting (fixed here, and checked against Example 1 of Sect. 2.2):

- A "tuple" is a unit of memory (Sect. 3). It enters with its path's initial size at its arrival
  time and follows its path's progress chart: at operator i it needs ``t_{i+1} - t_i`` units of
  processing, keeps size ``s_i`` meanwhile and has size ``s_{i+1}`` the moment that operator
  finishes it (a step function); after the last operator it leaves (size 0).
- Every operator input is a FIFO queue; an operator always works on its input's oldest tuple.
  An operator with several inputs (a join) takes them in timestamp order and is blocked while
  any input is empty (Sect. 4.3), unless that input's streams have ended (no arrivals left on
  its paths and nothing left upstream of it): a simulation knows when its streams end, so
  the last tuples drain instead of waiting forever. With ``join_wait="older"`` an empty input
  blocks the join only while a tuple older than the head it would process is still upstream
  of that input: timestamps are arrival times (Sect. 5.2, assumption 1), so nothing that
  arrives later can be older, and timestamp order (Sect. 4.3) is kept without waiting for the
  other stream's next tuple.
- One operator runs at a time. The policy is asked at every event: an arrival, or the running
  operator finishing its head tuple; also when the policy's :meth:`Policy.next_decision` comes
  due and, with ``quantum``, at least every ``quantum``. Between events nothing a policy looks
  at changes, so for static-priority policies this is exactly the paper's unit-step model
  ("each time unit, run the chosen operator"), without simulating every unit.
- Arrivals at time t are in the system (and counted in memory) at t and can be processed from
  t on. Memory is a right-continuous step function: ``memory_at(t)`` counts the arrivals at t
  and everything finished by t. So with unit steps, the value at t is the queue size after
  t steps of processing and t's arrival (Example 1's table).
- Latency of an output tuple: the time it leaves minus its arrival time.

Numbers stay as given (ints and ``Fraction`` stay exact); nothing is converted to float except
by :meth:`SimResult.sample`.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Real
from typing import Any

import numpy as np

from processors.core.scheduling.plan import SchedulingPlan
from processors.core.scheduling.policies import Policy, ReadyOperator, make_policy
from processors.core.scheduling.progress import ratio


@dataclass
class SimResult:
    """What a run measured. ``times``/``memory``: total queued memory just after each change;
    ``out_*``: one entry per tuple that left the system."""

    paths: list[str]
    times: list[Any] = field(default_factory=list)
    memory: list[Any] = field(default_factory=list)
    out_time: list[Any] = field(default_factory=list)
    out_arrival: list[Any] = field(default_factory=list)
    out_path: list[int] = field(default_factory=list)
    decisions: int = 0
    switches: int = 0
    busy: Any = 0  # processor time used
    end: Any = 0  # when the run stopped
    stuck: int = 0  # tuples still in the system then (blocked joins, or ``until``)
    trace: list[tuple[Any, str]] = field(default_factory=list)

    def memory_at(self, t: Real) -> Any:
        """Queued memory at time t (arrivals at t and work finished by t included)."""
        i = bisect.bisect_right(self.times, t)
        return self.memory[i - 1] if i else 0

    def sample(self, grid: Sequence[float] | np.ndarray) -> np.ndarray:
        """Memory at each time of ``grid`` (float)."""
        times = np.asarray(self.times, dtype=np.float64)
        mem = np.asarray(self.memory, dtype=np.float64)
        idx = np.searchsorted(times, np.asarray(grid, dtype=np.float64), side="right") - 1
        out = np.where(idx >= 0, mem[np.maximum(idx, 0)], 0.0)
        return out

    @property
    def peak_memory(self) -> Any:
        return max(self.memory, default=0)

    @property
    def latencies(self) -> list[Any]:
        return [d - a for d, a in zip(self.out_time, self.out_arrival, strict=True)]

    @property
    def max_latency(self) -> Any:
        return max(self.latencies, default=0)

    @property
    def mean_latency(self) -> Any:
        lat = self.latencies
        return ratio(sum(lat), len(lat)) if lat else 0


@dataclass(frozen=True)
class _Step:
    op: int  # operator index
    queue: int  # the operator's input queue for this path
    work: Any  # processing a unit of this path needs there
    size_after: Any  # its size once done (0 after the last operator)


class _Layout:
    """Operators, queues and per-path steps of a plan, indexed for the simulation loop."""

    def __init__(self, plan: SchedulingPlan) -> None:
        plan.validate()
        self.ops = plan.operators()
        self.op_index = {op: i for i, op in enumerate(self.ops)}
        self.paths = list(plan.paths)
        queue_ids: dict[tuple[str, object], int] = {}
        self.op_queues: list[list[int]] = [[] for _ in self.ops]
        self.steps: list[list[_Step]] = []
        self.size0: list[Any] = []
        for path in self.paths:
            ops = plan.paths[path]
            pts = plan.chart(path)
            steps = []
            for i, op in enumerate(ops):
                key = (op, ops[i - 1] if i else ("stream", path))
                if key not in queue_ids:
                    queue_ids[key] = len(queue_ids)
                    self.op_queues[self.op_index[op]].append(queue_ids[key])
                size_after = pts[i + 1][1] if i + 1 < len(ops) else 0
                steps.append(
                    _Step(self.op_index[op], queue_ids[key], pts[i + 1][0] - pts[i][0], size_after)
                )
            self.steps.append(steps)
            self.size0.append(pts[0][1])
        self.n_queues = len(queue_ids)
        # per input queue of a multi-input operator: the paths through it and every queue
        # upstream of it (its end-of-stream test)
        self.multi = [o for o, qs in enumerate(self.op_queues) if len(qs) > 1]
        self.feeding: dict[int, tuple[list[int], list[int]]] = {}
        for o in self.multi:
            for qid in self.op_queues[o]:
                paths, upstream = [], set()
                for p, steps in enumerate(self.steps):
                    for k, st in enumerate(steps):
                        if st.queue == qid:
                            paths.append(p)
                            upstream.update(s.queue for s in steps[:k])
                self.feeding[qid] = (paths, sorted(upstream))


def _arrival_list(
    plan: SchedulingPlan, arrivals: Mapping[str, Sequence[Real] | np.ndarray], paths: list[str]
) -> tuple[list[Any], list[int]]:
    pairs: list[tuple[Any, int]] = []
    index = {p: i for i, p in enumerate(paths)}
    for path, times in arrivals.items():
        if path not in index:
            raise ValueError(f"arrivals for unknown path {path!r}; paths: {paths}")
        seq = times.tolist() if isinstance(times, np.ndarray) else list(times)
        for t in seq:
            if not isinstance(t, Real) or not math.isfinite(t) or t < 0:
                raise ValueError(f"path {path!r}: arrival time {t!r} must be finite and >= 0")
        p = index[path]
        pairs.extend((t, p) for t in seq)
    pairs.sort(key=lambda x: x[0])  # stable: equal times keep path order
    return [t for t, _ in pairs], [p for _, p in pairs]


def simulate(
    plan: SchedulingPlan,
    policy: Policy | str,
    arrivals: Mapping[str, Sequence[Real] | np.ndarray],
    *,
    quantum: Real | None = None,
    until: Real | None = None,
    trace: bool = False,
    join_wait: str = "empty",
) -> SimResult:
    """Run ``policy`` on ``plan`` over the arrival times per path until everything has left
    (or ``until``; or only tuples blocked in a join with an empty input are left: ``stuck``).

    ``quantum``: ask the policy at least this often (Round-Robin time slices; the paper's
    minimum time quantum). ``trace``: record every decision as (time, operator).
    ``join_wait``: "empty" (the paper's rule: a join waits while any input is empty) or
    "older" (only while an older tuple is still upstream of the empty input)."""
    if join_wait not in ("empty", "older"):
        raise ValueError(f"join_wait must be 'empty' or 'older', got {join_wait!r}")
    older = join_wait == "older"
    if isinstance(policy, str):
        policy = make_policy(policy, plan)
    if quantum is not None and not (isinstance(quantum, Real) and quantum > 0):
        raise ValueError(f"quantum must be a positive number, got {quantum!r}")
    lay = _Layout(plan)
    arr_t, arr_p = _arrival_list(plan, arrivals, lay.paths)
    n_arr = len(arr_t)
    res = SimResult(paths=lay.paths)
    queues: list[deque[list[Any]]] = [deque() for _ in range(lay.n_queues)]
    op_queues = lay.op_queues
    ops = lay.ops
    op_index = lay.op_index
    steps = lay.steps
    ready_map: dict[str, ReadyOperator] = {}
    pending = [0] * len(lay.paths)
    for p in arr_p:
        pending[p] += 1
    multi = lay.multi
    feeding = lay.feeding

    def ended(qid: int) -> bool:
        paths, upstream = feeding[qid]
        return all(pending[p] == 0 for p in paths) and not any(queues[u] for u in upstream)

    def refresh(o: int) -> None:
        qs = op_queues[o]
        if len(qs) == 1:
            q = queues[qs[0]]
            if q:
                ready_map[ops[o]] = ReadyOperator(ops[o], q[0][0], len(q))
            else:
                ready_map.pop(ops[o], None)
            return
        heads = [queues[i][0][0] for i in qs if queues[i]]
        if heads:
            h = min(heads)
            if all(queues[i] or ended(i) or (older and not older_upstream(i, h)) for i in qs):
                ready_map[ops[o]] = ReadyOperator(ops[o], h, sum(len(queues[i]) for i in qs))
                return
        ready_map.pop(ops[o], None)

    def older_upstream(qid: int, h: Any) -> bool:
        # every queue is in arrival order (each is fed by one operator working in order, or
        # by a join working in timestamp order), so its head is its oldest tuple
        return any(queues[u] and queues[u][0][0] < h for u in feeding[qid][1])

    log_t, log_m = res.times, res.memory
    out_time, out_arr, out_path = res.out_time, res.out_arrival, res.out_path
    first_op = [s[0].op for s in steps]
    first_q = [s[0].queue for s in steps]
    work0 = [s[0].work for s in steps]
    size0 = lay.size0
    ai = 0
    now: Any = arr_t[0] if n_arr else 0
    mem: Any = 0
    in_system = 0
    busy: Any = 0
    current: str | None = None
    inf = math.inf
    while True:
        if ai < n_arr and arr_t[ai] <= now:
            touched = set()
            while ai < n_arr and arr_t[ai] <= now:
                p = arr_p[ai]
                queues[first_q[p]].append([arr_t[ai], p, 0, work0[p], size0[p]])
                mem = mem + size0[p]
                in_system += 1
                pending[p] -= 1
                touched.add(first_op[p])
                ai += 1
            touched.update(multi)
            for o in touched:
                refresh(o)
            log_t.append(now)
            log_m.append(mem)
        if until is not None and now >= until:
            break
        next_arr = arr_t[ai] if ai < n_arr else inf
        if not ready_map:
            if next_arr == inf:
                break
            now = next_arr if until is None or next_arr <= until else until
            continue
        op = policy.choose(now, list(ready_map.values()))
        res.decisions += 1
        wake = policy.next_decision()
        t_stop = next_arr
        if wake is not None and now < wake < t_stop:
            t_stop = wake
        if quantum is not None and now + quantum < t_stop:
            t_stop = now + quantum
        if until is not None and until < t_stop:
            t_stop = until
        if op is None:
            if t_stop == inf:
                break
            now = t_stop
            continue
        if op not in ready_map:
            raise ValueError(
                f"policy {policy.name!r} chose {op!r}, which is not ready "
                f"(ready: {sorted(ready_map)})"
            )
        if trace:
            res.trace.append((now, op))
        if op != current:
            res.switches += 1
            current = op
        o = op_index[op]
        qs = op_queues[o]
        if len(qs) == 1:
            q = queues[qs[0]]
        else:  # timestamp order across the inputs (ties: the first input)
            q = min((queues[i] for i in qs if queues[i]), key=lambda d: d[0][0])
        unit = q[0]
        need = unit[3]
        if now + need > t_stop:
            done = t_stop - now
            unit[3] = need - done
            busy = busy + done
            now = t_stop
            continue
        now = now + need
        busy = busy + need
        q.popleft()
        p = unit[1]
        path_steps = steps[p]
        step = path_steps[unit[2]]
        mem = mem + (step.size_after - unit[4])
        nxt = unit[2] + 1
        if nxt < len(path_steps):
            ns = path_steps[nxt]
            unit[2] = nxt
            unit[3] = ns.work
            unit[4] = step.size_after
            queues[ns.queue].append(unit)
            if ns.op != o:
                refresh(ns.op)
        else:
            in_system -= 1
            out_time.append(now)
            out_arr.append(unit[0])
            out_path.append(p)
        refresh(o)
        for m in multi:
            refresh(m)
        log_t.append(now)
        log_m.append(mem)
    res.busy = busy
    res.end = now
    res.stuck = in_system
    return res
