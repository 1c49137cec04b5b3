"""What the shedding controller measures from the Stats records (docs/shedding.md, "The load").

For each agent of each worker, over the newest statistics measured under the shares in force:
its busy share, the tuples it took in, and the tuples *offered* to it, which is what it took in
plus how fast what waits before it grows. A worker's agents share its processor: to keep up
it would need its utilization times the pressure on its bottleneck agent (offered / taken),
and the processor whole if that agent falls behind (:func:`worker_need`); the neediest
worker's need is the query's.

What waits before an agent that other agents feed (a join after the ingest agents) is counted
from the flow: what its feeders wrote less what it took in. Fetch high watermarks cannot say
it: a consumer whose buffer is full stops fetching, so the high watermark it knows goes stale
(a live ramp showed 3,000 records waiting by them where 50,000 did). Before an ingest agent
only the source topic's high watermarks tell, and the ingest agents keep fetching (a dropped
record is not decoded), so they stay fresh; their growth is a least-squares slope (one reading
is noisy). What accumulates upstream of an agent reaches it later: it is offered to it too,
scaled by the selectivity of the agents in between (a drop box's share among them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Record = Mapping[str, Any]
#: a worker whose bottleneck is offered more than this for what it takes is falling behind
SATURATED = 1.1
#: what waits before a source agent under this many seconds of its reading is fetch noise
SOURCE_NOISE_S = 0.25
#: offered over taken is capped here (an agent that took nothing while offered some)
MAX_PRESSURE = 10.0


@dataclass(frozen=True)
class Signals:
    need: float  # the bottleneck agent's processor share to keep up at the current shares
    bottleneck: str  # which agent (worker/agent)
    read_per_s: float  # records read by the ingest agents, all workers
    growth_per_s: float  # growth of the records waiting before every agent (negative: draining)
    backlog: int  # records waiting before every agent now
    latency_ms: float  # the largest output latency in the window
    workers: int
    backlog_s: float = 0.0  # the work waiting, in seconds of the busiest worker's processor
    rising: float = 0.0  # how fast the records read grow, a share of their rate a second
    saturated: bool = False  # the neediest worker's bottleneck falls behind


def agent_records(records: Sequence[Record]) -> list[Record]:
    return [r for r in records if r.get("scope", "AGENT") == "AGENT" and r["agent"] != "scheduler"]


def signals(
    records: Sequence[Record], window_ms: int, since_ms: int = 0, min_span_ms: int = 0
) -> Signals | None:
    """The load over the newest ``window_ms`` of ``records``, from what was measured after
    ``since_ms`` (under the shares in force) over at least ``min_span_ms`` (None: not yet)."""
    every = agent_records(records)
    recent = [r for r in every if r["window_start_ms"] >= since_ms]
    if not recent:
        return None
    end = max(r["window_end_ms"] for r in recent)
    recent = [r for r in recent if r["window_end_ms"] > end - window_ms]
    start = min(r["window_start_ms"] for r in recent)
    if end - start < max(min_span_ms, 1):
        return None
    span_s = (end - start) / 1000
    by_agent: dict[tuple[str, str], list[Record]] = {}
    for r in recent:
        by_agent.setdefault((str(r["worker_id"]), str(r["agent"])), []).append(r)
    for mine in by_agent.values():
        mine.sort(key=lambda r: r["window_end_ms"])
    names = {a for _, a in by_agent}
    taken = {a: _total(recent, a, "tuples_in") / span_s for a in names}
    out = {a: _total(recent, a, "tuples_out") / span_s for a in names}
    feeds = feeders(every)
    growth: dict[str, float] = {}
    for a in names:
        if feeds.get(a):  # fed by agents: the flow balance, exact
            growth[a] = sum(out.get(f, 0.0) for f in feeds[a]) - taken[a]
        else:  # a source: its high watermarks (a reader fetches in bursts: what waits swings
            # by a fetch or two, which is no growth while it stays under SOURCE_NOISE_S)
            growth[a] = sum(
                _source_growth(mine, span_s)
                for (_, x), mine in by_agent.items() if x == a
            )  # fmt: skip
    upstream = _accumulated(names, feeds, growth, taken, out)
    queued = flow_queues(every, feeds)
    need, bottleneck, backlog = 0.0, "", 0
    workers: dict[str, list[tuple[str, float, float, float]]] = {}
    work_by_worker: dict[str, float] = {}
    for (worker, agent), mine in by_agent.items():
        busy = sum(int(r["busy_ns"]) for r in mine) / (span_s * 1e9)
        mine_taken = sum(int(r["tuples_in"]) for r in mine) / span_s
        part = mine_taken / taken[agent] if taken[agent] else 1.0 / len(by_agent)
        offered = max(0.0, mine_taken + part * (growth[agent] + upstream.get(agent, 0.0)))
        if not ("topic" in mine[-1] and not mine[-1]["topic"]):  # not inside another's turn
            workers.setdefault(worker, []).append((agent, busy, offered, mine_taken))
        waiting = max(int(mine[-1]["backlog_tuples"]), int(part * queued.get(agent, 0)))
        backlog += waiting
        if mine_taken > 0:  # its processor time per tuple times what waits
            work_by_worker[worker] = work_by_worker.get(worker, 0.0) + waiting * busy / mine_taken
    saturated = False
    for worker, agents in workers.items():
        mine_need, agent, full = worker_need(agents)
        if mine_need > need:
            need, bottleneck, saturated = mine_need, f"{worker}/{agent}", full
    read_records = [r for r in recent if str(r["agent"]).startswith("ingest.")]
    read = sum(taken[a] for a in names if a.startswith("ingest."))
    rising = _rising(read_records, read)
    latency = max((float(r["latency_ms_max"]) for r in recent), default=0.0)
    return Signals(
        max(need, 0.0), bottleneck, read, sum(growth.values()), backlog, latency, len(workers),
        max(work_by_worker.values(), default=0.0), rising, saturated,
    )  # fmt: skip


def worker_need(
    agents: Sequence[tuple[str, float, float, float]],
) -> tuple[float, str, bool]:
    """One worker's need, its bottleneck agent and whether that one falls behind, from
    (agent, busy, offered, taken) each.

    Its agents share its processor (one event loop): its utilization is their busy shares
    added up (not those of agents that run inside another's turn, as a step's result writes
    do). The agent offered the most for what it takes sets the pressure; a worker under more
    pressure than SATURATED is falling behind, so its processor is full whatever its agents'
    busy times say (the loop's own work is in none of them): it needs the pressure itself."""
    utilization = sum(busy for _, busy, _, _ in agents)
    pressure, bottleneck = 0.0, ""
    for agent, _busy, offered, taken in agents:
        ratio = min(offered / taken, MAX_PRESSURE) if taken > 0 else (MAX_PRESSURE if offered
                                                                      else 0.0)  # fmt: skip
        if ratio > pressure:
            pressure, bottleneck = ratio, agent
    if pressure > SATURATED:
        return pressure * max(utilization, 1.0), bottleneck, True
    return pressure * utilization, bottleneck, False


def _rising(read_records: Sequence[Record], read_per_s: float) -> float:
    """How fast the records read grow, as a share of the rate a second (0 if not rising):
    each worker's least-squares slope of its rate per statistics interval, added up (the
    workers' intervals do not line up)."""
    if read_per_s <= 0:
        return 0.0
    by_worker: dict[str, dict[int, list[Record]]] = {}
    for r in read_records:
        ends = by_worker.setdefault(str(r["worker_id"]), {})
        ends.setdefault(int(r["window_end_ms"]), []).append(r)
    total = 0.0
    for by_end in by_worker.values():
        points = []
        for end, rs in sorted(by_end.items()):
            span = max(int(r["window_end_ms"]) - int(r["window_start_ms"]) for r in rs) / 1000
            if span > 0:
                points.append((end / 1000, sum(int(r["tuples_in"]) for r in rs) / span))
        total += slope(points)
    return max(0.0, total / read_per_s)


def _source_growth(mine: Sequence[Record], span_s: float) -> float:
    """How fast what waits before a source agent grows (least squares), 0 for a rise while
    it stays under SOURCE_NOISE_S of its reading."""
    rise = slope([(r["window_end_ms"] / 1000, float(r["backlog_tuples"])) for r in mine])
    read_per_s = sum(int(r["tuples_in"]) for r in mine) / span_s
    if rise > 0 and int(mine[-1]["backlog_tuples"]) < SOURCE_NOISE_S * read_per_s:
        return 0.0
    return rise


def _total(records: Sequence[Record], agent: str, key: str) -> int:
    return sum(int(r[key]) for r in records if r["agent"] == agent)


def feeders(records: Sequence[Record]) -> dict[str, list[str]]:
    """Which agents feed which: an agent reads the topic another writes (its ``out_topic``). A
    multi-input agent (a join) names only its first topic in its statistics: the agents of the
    same stage as its named feeder whose output no agent names feed it too."""
    topic_of = {str(r["agent"]): r.get("topic") for r in records}
    out_of = {str(r["agent"]): r.get("out_topic") for r in records}
    stage_of = {str(r["agent"]): r.get("stage") for r in records}
    read = {t for t in topic_of.values() if t}
    feeds: dict[str, list[str]] = {}
    for a, t in topic_of.items():
        direct = [f for f, o in out_of.items() if t and o == t and f != a]
        if not direct:
            continue
        stages = {stage_of[f] for f in direct}
        orphans = [
            f for f, o in out_of.items()
            if f not in direct and f != a and stage_of[f] in stages and o and o not in read
        ]  # fmt: skip
        feeds[a] = direct + orphans
    return feeds


def _accumulated(
    names: set[str], feeds: Mapping[str, list[str]], growth: Mapping[str, float],
    taken: Mapping[str, float], out: Mapping[str, float],
) -> dict[str, float]:  # fmt: skip
    """What accumulates upstream of each agent per second, in that agent's input tuples."""
    memo: dict[str, float] = {}

    def of(a: str, depth: int) -> float:
        if a in memo or depth > 20:
            return memo.get(a, 0.0)
        total = 0.0
        for f in feeds.get(a, ()):
            selectivity = out.get(f, 0.0) / taken[f] if taken.get(f) else 1.0
            total += selectivity * (growth.get(f, 0.0) + of(f, depth + 1))
        memo[a] = total
        return total

    return {a: of(a, 0) for a in names}


def flow_queues(records: Sequence[Record], feeds: Mapping[str, list[str]]) -> dict[str, int]:
    """What waits before each fed agent now: its feeders' output less its input, summed over
    the records' intervals (never below zero)."""
    net: dict[int, dict[str, int]] = {}
    fed_by = {f: [a for a, fs in feeds.items() if f in fs] for fs in feeds.values() for f in fs}
    for r in records:
        a, at = str(r["agent"]), net.setdefault(int(r["window_end_ms"]), {})
        if a in feeds:
            at[a] = at.get(a, 0) - int(r["tuples_in"])
        for b in fed_by.get(a, ()):
            at[b] = at.get(b, 0) + int(r["tuples_out"])
    queued: dict[str, int] = {}
    for end in sorted(net):
        for a, x in net[end].items():
            queued[a] = max(0, queued.get(a, 0) + x)
    return queued


def slope(points: Sequence[tuple[float, float]]) -> float:
    """The least-squares slope of (t, y) points (0 for fewer than two)."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mt = sum(t for t, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    return 0.0 if var <= 0 else sum((t - mt) * (y - my) for t, y in points) / var
