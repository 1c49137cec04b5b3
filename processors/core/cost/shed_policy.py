"""How much the drop boxes keep next, from what the workers measured (docs/shedding.md).

Every second the shedding controller reads the Stats records measured under the shares in
force and decides:

1. **The load** (:mod:`processors.core.cost.shed_signals`): the bottleneck agent's ``need``,
   the processor share it would take to keep up with what is offered to it, counted from the
   flow between agents; and the work that waits, in seconds of processor.
2. **The budget.** The cost must shrink (or may grow) by ``scale = aim / need``, where ``aim``
   is the query's target utilization less what draining the waiting work within two seconds
   takes (unless the shares in force drain it that soon).
3. **The shares.** The cost model (Ayad & Naughton, Sect. 3) with the statistics measured on
   the stats topic, un-shed (the ingest agents count every record read; RANGE windows are
   divided by the shares they were measured at), places the drop boxes for ``scale`` times
   the current cost (Sect. 5, :func:`processors.core.cost.shedding.approximate`: the knapsack
   over ROWS windows, the search over RANGE ones), at least ``min_keep`` each; the shares are
   then scaled alike until the records kept a second are ``scale`` times those kept now
   (streamon's hash joins cost about what they keep, see :func:`_modelled`). Without the
   figures the model needs yet (a query's first seconds), every share is scaled alike.
4. **Damping.** A cut needs clear evidence (:func:`_overloaded`), else the shares are held. A
   raise closes half the gap (``RAISE_GAIN``), at most to ``1.5 * share + 0.1`` per decision
   (a load measured at small shares extrapolates badly), unless the load is clearly light
   (need under half the aim, a quarter second's reading at most waiting, latency within the
   bound): then the boxes are lifted at once.

The measured utilization calibrates the model (its absolute cost per tuple need not be right,
only its shape); the backlog and latency feedback correct what both miss.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from processors.core.cost.inputs import CostInputs, bind
from processors.core.cost.measured import measured_stats
from processors.core.cost.model import evaluate
from processors.core.cost.shapes import running_shape
from processors.core.cost.shed_signals import Record, Signals
from processors.core.cost.shedding import approximate
from processors.core.plan import LogicalPlan, ShedConfig

#: while the latency is over the bound and the backlog grows, the target is lowered by this
#: factor
DRAIN = 0.7
#: work waiting beyond QUEUE_OK of the bound is drained within DRAIN_HORIZON_S, the target
#: lowered by what that takes, to no less than DRAIN_FLOOR of it
QUEUE_OK, DRAIN_HORIZON_S, DRAIN_FLOOR = 0.25, 2.0, 0.5
#: a rising offered rate is met this far ahead (a decision takes effect a second or two after
#: the statistics it is made on), at most MAX_RISING of the rate a second
LEAD_S, MAX_RISING = 2.0, 0.25
#: shares are cut only on clear evidence (see _overloaded)
HIGH_LATENCY, HYSTERESIS = 0.8, 1.15
#: between decisions, an offered rate this much above the last decision's is acted on at once;
#: while shedding, a rise of SHEDDING_RISE already is (a load climbing 7% a second was 20%
#: above the shares' rate only after 3 s, the shares too high), and a fall of SHEDDING_FALL
#: (at 20% the shares lagged a load falling 7-15% a second by 2-3 s: 0.69 of the feasible
#: kept over the ramp's descent, docs/shedding.md)
FAST_RISE = 1.2
SHEDDING_RISE = SHEDDING_FALL = 1.1
#: a first cut (nothing shed yet) waits for a second decision to confirm it unless what is
#: offered rises this fast (a share of its rate a second) or the work waiting exceeds the bound
CONFIRM_RISE = 0.05
#: what reading (and dropping) a record costs, as a share of what processing a kept one
#: costs: the drop box refuses records before their decode, and since the consumer reads
#: them as columns (processors.runtime.fetch_runs) no object is made of them either.
#: Measured by the shedding experiment's second staircase: offered three times its capacity
#: C, the worker kept up with 0.77-1.16 C over seven runs, median 0.975 C, so by
#: C (1 + r) = 0.975 C + 3 C r, r = 0.0125 (docs/shedding.md). It was 0.05, then 0.1,
#: estimates from the timeline; at 0.05 the feed-forward cut a climb to three times C by a
#: tenth of C more than the median reading cost calls for.
#: feed_forward holds the cost of both, not the kept rate alone
READ_COST = 0.0125
#: shares closer than this to the current ones (and than MATERIAL_SHARE of them) are not
#: worth a new SHED record: at the shares of a threefold overload (~0.25) 0.02 alone was 8%
#: of the kept rate, and raises that small were never made
MATERIAL, MATERIAL_SHARE = 0.02, 0.05
#: the search's effort at run time (cost model evaluations; docs/shedding.md)
RUN_TIME_EFFORT = 400
#: a raise closes RAISE_GAIN of the gap between the records kept and those the aim allows:
#: the need measured over 3 s swung by 0.61-0.73 at the same shares at the experiment's top
#: rate, and closing all of it on a low sample overshot (0.27 -> 0.36, latency 700 ms)
RAISE_GAIN = 0.5
#: a raise is at most to current * RAISE_FACTOR + RAISE_STEP ...
RAISE_FACTOR, RAISE_STEP = 1.5, 0.1
#: ... unless the load is light: the bottleneck needs under LIGHT of the aim, at most
#: LIGHT_BACKLOG records (or LIGHT_BACKLOG_S seconds of reading) wait, and the latency is
#: within the bound (then a lift is at once)
LIGHT, LIGHT_BACKLOG, LIGHT_BACKLOG_S = 0.5, 100, 0.25


def dropping(shares: Mapping[str, float]) -> bool:
    """Whether any drop box of ``shares`` drops (keeps less than everything)."""
    return any(v < 1.0 for v in shares.values())


def cut_explained(config: ShedConfig, s: Signals) -> bool:
    """Whether a first cut is explained without a second look: what is offered rises by
    CONFIRM_RISE a second or more, or more work waits than the latency bound. Otherwise the
    controller waits for the next decision to confirm it (a worker that stalls for a moment
    measures like an overloaded one for a window; docs/shedding.md)."""
    return s.rising >= CONFIRM_RISE or s.backlog_s > config.max_latency_ms / 1000


def target(config: ShedConfig, s: Signals) -> float:
    """The processor share to aim at: the configured one, less what draining the work that
    waits beyond QUEUE_OK of the bound within DRAIN_HORIZON_S takes (at least DRAIN_FLOOR of
    the configured share) unless the shares in force drain it that soon; otherwise less by
    DRAIN while the output latency is over the bound and the backlog grows."""
    aim = config.target_utilization
    bound_s = config.max_latency_ms / 1000
    excess = s.backlog_s - QUEUE_OK * bound_s
    draining = s.growth_per_s < 0 and s.backlog / -s.growth_per_s <= DRAIN_HORIZON_S
    if excess > 0 and not draining:
        aim = max(DRAIN_FLOOR * aim, aim - excess / DRAIN_HORIZON_S)
    elif s.latency_ms > config.max_latency_ms and s.growth_per_s > 0:
        aim *= DRAIN
    return aim


def _capped(
    keep: Mapping[str, float], current: Mapping[str, float], lift: bool
) -> dict[str, float]:
    """``keep`` with each raise limited to RAISE_FACTOR * current + RAISE_STEP (a load
    measured at small shares extrapolates badly to large ones: a RANGE join's cost is not
    linear in them); cuts are not limited, nor a lift when the load is clearly light."""
    if lift:
        return dict(keep)
    out = {}
    for n, k in keep.items():
        now = current.get(n, 1.0)
        out[n] = min(k, 1.0, now * RAISE_FACTOR + RAISE_STEP) if k > now else k
    return out


def next_keep(
    plan: LogicalPlan,
    records: Sequence[Record],
    s: Signals,
    current: Mapping[str, float],
    config: ShedConfig,
) -> tuple[dict[str, float], str]:
    """The shares the drop boxes should keep next, and why (see the module docstring)."""
    names = [x.name for x in plan.streams]
    # the load goes on rising while the shares travel: meet it LEAD_S ahead
    need = s.need * (1.0 + min(s.rising, MAX_RISING) * LEAD_S)
    aim = target(config, s)
    if need <= 0:
        return dict(current), "no load measured"
    scale = aim / need
    if not dropping({n: current.get(n, 1.0) for n in names}) and scale >= 1.0:
        return dict.fromkeys(names, 1.0), "keeping up"
    if scale < 1.0 and not _overloaded(config, s, need, aim):
        return dict(current), "within the bound: shares held"
    why = (f"{s.bottleneck} needs {need:.2f} of a processor for its input"
           f"{f' (rising {100 * s.rising:.0f}%/s)' if s.rising > 0.01 else ''}, aim {aim:.2f}; "
           f"latency {s.latency_ms:.0f} ms (bound {config.max_latency_ms} ms), backlog "
           f"{s.backlog}")  # fmt: skip
    light = need < LIGHT * aim
    light = light and s.backlog <= max(LIGHT_BACKLOG, LIGHT_BACKLOG_S * s.read_per_s)
    light = light and s.latency_ms < config.max_latency_ms
    # cut fast; raise by half the gap, unless the load is light (then lift)
    step = scale if scale < 1.0 or light else 1.0 + RAISE_GAIN * (scale - 1.0)
    try:
        keep = _modelled(plan, records, s, current, config, step)
    except ValueError as exc:  # the model lacks figures yet: every share alike
        keep = {n: min(1.0, max(config.min_keep, current.get(n, 1.0) * step)) for n in names}
        why = f"{why} (shares scaled alike: {exc})"
    return _capped(keep, current, light), why


@dataclass(frozen=True)
class Decided:
    """What the last decision on the statistics saw: the rate offered to this worker
    (records/s), the need and the aim."""

    rate: float
    need: float
    aim: float


def feed_forward(
    current: Mapping[str, float], rate_now: float, last: Decided, config: ShedConfig
) -> tuple[dict[str, float], Decided, str] | None:
    """Between decisions on the statistics (a second or more apart, and their figures a
    second old), the rate offered to the worker's inputs (their high watermarks) is fresh. While
    shedding, when it rose by SHEDDING_RISE or fell by SHEDDING_FALL since the last decision,
    every share changes by the inverse, so that each input's kept rate (and so the load: a RANGE
    window holds what its input keeps) stays as that decision left it, less (or plus) what
    reading the extra (or fewer) records costs (READ_COST): the shares shrink in a climb and
    grow back as the load falls, up to a lift. Not shedding yet, a rise starts the shares at the
    aim over the need grown with the rate, if that is clearly over. The new shares, what they
    are decided on (for the next change), why; None: no change."""
    if last.rate <= 0 or last.need <= 0 or rate_now <= 0:
        return None
    shedding = dropping(current)
    rise = SHEDDING_RISE if shedding else FAST_RISE
    rose, fell = rate_now >= rise * last.rate, rate_now * SHEDDING_FALL <= last.rate
    if not (rose or (fell and shedding)):
        return None
    grown = last.need * rate_now / last.rate
    if not shedding and grown <= HYSTERESIS * last.aim:
        return None
    if shedding:  # hold READ_COST * read + kept: the kept rate gives way to the reading
        read = READ_COST * (rate_now - last.rate) / rate_now
        keep = {
            n: min(1.0, max(config.min_keep, v * last.rate / rate_now - read))
            for n, v in current.items()
        }
    else:
        keep = {n: min(1.0, max(config.min_keep, v * last.aim / grown)) for n, v in current.items()}
    held = (
        "cost held (kept and read)" if shedding else f"need about {grown:.2f}, aim {last.aim:.2f}"
    )
    why = f"offered {last.rate:.0f}/s -> {rate_now:.0f}/s since the last decision: {held}"
    return keep, Decided(rate_now, last.need if shedding else last.aim, last.aim), why


def at_the_rate_now(s: Signals, rate_now: float, window_rate: float, config: ShedConfig) -> Signals:
    """The statistics' need for the offered rate now, when that has clearly fallen (by
    SHEDDING_FALL) below the rate offered to this worker over the statistics' window: at the same
    shares the work goes with the records read, and in a falling load the window's need,
    seconds old, would hold the shares too low. A worker that falls behind also reads less
    while as much is offered: not when it is saturated or work waits (QUEUE_OK of the bound).
    A rise is met by the newest statistics and the lead instead (:func:`next_keep`)."""
    if rate_now <= 0 or window_rate <= 0 or rate_now * SHEDDING_FALL > window_rate:
        return s
    if s.saturated or _queueing(config, s):
        return s
    return replace(s, need=s.need * rate_now / window_rate)


def _overloaded(config: ShedConfig, s: Signals, need: float, aim: float) -> bool:
    """Whether a cut is called for: work waits beyond QUEUE_OK of the bound while the
    bottleneck falls behind or the latency nears the bound (HIGH_LATENCY of it), or the need
    is clearly (HYSTERESIS) over the aim. Otherwise the measurement's noise alone would cut,
    and a latency that no queue explains (a query's own: its windows, its batches) is not
    shortened by dropping."""
    late = s.latency_ms > HIGH_LATENCY * config.max_latency_ms
    return (_queueing(config, s) and (s.saturated or late)) or need > HYSTERESIS * aim


def _queueing(config: ShedConfig, s: Signals) -> bool:
    """Whether more work waits than QUEUE_OK of the latency bound."""
    return s.backlog_s > QUEUE_OK * config.max_latency_ms / 1000


def _modelled(
    plan: LogicalPlan,
    records: Sequence[Record],
    s: Signals,
    current: Mapping[str, float],
    config: ShedConfig,
    scale: float,
) -> dict[str, float]:
    """Sect. 5's shares for ``scale`` times the current cost: the model places them (which
    inputs to drop from), then they are scaled alike until the records kept a second are
    ``scale`` times those kept now. The model's cost of a RANGE join grows with the product
    of the shares (every probe scans the other window, as the paper's joins do); streamon's
    hash joins cost about what they keep: at the shedding experiment's top rate the measured
    need stayed at 0.61-0.69 of a processor while the shares rose by a quarter, and the model's
    square-root raises left it there, under the aim, for seconds (docs/shedding.md). It is
    also what :func:`feed_forward` holds between decisions."""
    figures = measured_stats(plan, list(records), "the stats topic")
    inputs = _unshed(bind(plan, figures), current)
    names = tuple(x.name for x in plan.streams)
    shape = running_shape(names, plan.join_tree)
    now_keep = {n: current.get(n, 1.0) for n in names}
    now = evaluate(shape, inputs, now_keep).cost_per_s
    if now <= 0 or math.isinf(now):
        raise ValueError("the model gives no cost for the current shares")
    got = approximate(shape, inputs, config.min_keep, capacity=scale * now,
                      effort=RUN_TIME_EFFORT)  # fmt: skip
    rates = {n: inputs.streams[n].rate for n in names}
    goal = scale * sum(rates[n] * now_keep[n] for n in names)
    return _rescaled(got.keep, rates, goal, config.min_keep)


def _rescaled(
    keep: Mapping[str, float], rates: Mapping[str, float], goal: float, floor: float
) -> dict[str, float]:
    """``keep`` times the factor (bisected) that makes the records kept a second (``rates``
    times the shares) ``goal``: each share within [floor, 1]."""

    def at(m: float) -> dict[str, float]:
        return {n: min(1.0, max(floor, k * m)) for n, k in keep.items()}

    def kept(m: float) -> float:
        return sum(rates[n] * x for n, x in at(m).items())

    lo, hi = 0.0, 1.0 / max(min(keep.values()), 1e-9)
    if kept(hi) <= goal:
        return at(hi)
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if kept(mid) <= goal else (lo, mid)
    return at(lo)


def _unshed(inputs: CostInputs, current: Mapping[str, float]) -> CostInputs:
    """The inputs without the drop boxes' effect: the rates of all records read (kept or not),
    RANGE windows as if every record were kept."""
    streams = {}
    for name, st in inputs.streams.items():
        x = max(current.get(name, 1.0), 1e-6)
        window = st.window if st.tuple_window or math.isinf(st.window) else st.window / x
        streams[name] = replace(st, window=window)
    return CostInputs(streams, inputs.joins, inputs.join_cost_s, inputs.filter_cost_s,
                      inputs.capacity)  # fmt: skip


def material(new: Mapping[str, float], old: Mapping[str, float]) -> bool:
    """Whether ``new`` shares differ enough from ``old`` to publish (lifting always is)."""
    lifting = not dropping(new) and dropping(old)

    def moved(n: str) -> bool:
        was = old.get(n, 1.0)
        return abs(new[n] - was) > min(MATERIAL, MATERIAL_SHARE * was)

    return lifting or any(moved(n) for n in new)
