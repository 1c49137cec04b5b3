"""Operator scheduling for memory and latency: Babcock, Babu, Datar, Motwani, Thomas, *Operator
Scheduling in Data Stream Systems* (VLDB J. 2004).

- :mod:`.progress`: progress charts, lower envelopes, chains (Sect. 3, 4.1), Mixed's clipping
  (Sect. 5.3);
- :mod:`.plan`: the scheduling plan (paths, statistics, queries, latency thresholds);
- :mod:`.paths`: query trees over several streams split into paths, sliding-window join
  statistics (Sect. 4.3);
- :mod:`.policies`: Chain, Chain-Flush, Mixed, FIFO, Round-Robin, Greedy behind one
  ``choose(now, ready)`` interface;
- :mod:`.simulator`: a single-processor simulator measuring queue memory and output latency.

Pure Python (numpy for sampling only): no Faust, no Kafka.
"""

from processors.core.scheduling.paths import (
    OpNode,
    Stream,
    WindowJoin,
    join_stats,
    query_plan,
    split_paths,
    stats_and_rates,
    window_join_stats,
)
from processors.core.scheduling.plan import (
    SchedulingPlan,
    chart_remaining_times,
    merge_plans,
    plan_from_charts,
)
from processors.core.scheduling.policies import (
    POLICIES,
    Policy,
    ReadyOperator,
    make_policy,
)
from processors.core.scheduling.progress import (
    Segment,
    chains,
    chart_from_points,
    clip_envelope,
    envelope_gaps,
    greedy_priorities,
    lower_envelope,
    operator_priorities,
    progress_chart,
)
from processors.core.scheduling.simulator import SimResult, simulate

__all__ = [
    "POLICIES",
    "OpNode",
    "Policy",
    "ReadyOperator",
    "SchedulingPlan",
    "Segment",
    "SimResult",
    "Stream",
    "WindowJoin",
    "chains",
    "chart_from_points",
    "chart_remaining_times",
    "clip_envelope",
    "envelope_gaps",
    "greedy_priorities",
    "join_stats",
    "lower_envelope",
    "make_policy",
    "merge_plans",
    "operator_priorities",
    "plan_from_charts",
    "progress_chart",
    "query_plan",
    "simulate",
    "split_paths",
    "stats_and_rates",
    "window_join_stats",
]
