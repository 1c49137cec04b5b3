"""The settings part of :class:`processors.core.query.Query`: how a query runs rather than what
it computes (lateness, idle inputs, filter ordering, scheduling, the processing guarantee)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Self

from processors.core.join_tree import JoinTree, JoinTreeError, parse_join_tree
from processors.core.ordering.config import OrderingConfig, OrderingConfigError
from processors.core.plan import GUARANTEES, JOIN_OUTPUTS, QueryError, ShedConfig
from processors.core.scheduling.config import SchedulingConfig, SchedulingConfigError
from processors.core.validation import check_ordering_type


class QuerySettings:
    """Methods that set how the query runs; each returns the query for chaining."""

    _lateness_ms: int
    _idle_timeout_ms: int
    _memory_limit_mb: int
    _ordering: OrderingConfig | None
    _scheduling: SchedulingConfig | None
    _guarantee: str
    _join_tree: JoinTree | None
    _shedding: ShedConfig | None
    _join_output: str

    def lateness(self, ms: int) -> Self:
        """How late (in event time) a tuple may arrive and still enter its window in order."""
        if not isinstance(ms, int) or isinstance(ms, bool) or ms < 0:
            raise QueryError(f"lateness(): must be a non-negative int of ms, got {ms!r}")
        self._lateness_ms = ms
        return self

    def idle_timeout(self, ms: int) -> Self:
        """How long an input partition that has been read to its end may stay quiet before
        windows and joins stop waiting for it (default 3,000 ms)."""
        if not isinstance(ms, int) or isinstance(ms, bool) or ms < 1:
            raise QueryError(f"idle_timeout(): must be a positive int of ms, got {ms!r}")
        self._idle_timeout_ms = ms
        return self

    def memory_limit(self, mb: int) -> Self:
        """What each worker's windows, join indexes and join buffers of this query may hold
        (default 512 MB). Past it, the inputs whose deltas wait for a slower input are paused
        (they wait in the broker instead) until the slow one catches up; state that no pause
        can shrink is reported, never dropped (docs/windows-and-joins.md, "Memory")."""
        if not isinstance(mb, int) or isinstance(mb, bool) or mb < 1:
            raise QueryError(f"memory_limit(): must be a positive int of MB, got {mb!r}")
        self._memory_limit_mb = mb
        return self

    def adapt(self, algorithm: str = "agreedy", **settings: Any) -> Self:
        """How filter stages order the filters: the algorithm and its profiling settings.

        ``algorithm`` is one of agreedy (A-Greedy+, the default), agreedy_exact (the paper's
        A-Greedy), sweep, independent, localswaps or fixed; the settings are those of
        :class:`OrderingConfig` (``profile_probability``, ``window_tuples``, ``window_ms``,
        ``alpha``, ``min_profile_tuples``, ``costs``, ``cost_samples``, ``seed``, and
        A-Greedy+'s ``confidence_z``, ``p_floor``, ``drift_effect``: docs/adaptive-filters.md).
        Without adapt(), filters run A-Greedy+. ``caching=True`` and/or
        ``cache_memory_mb=64`` make the MJoin adapt subresult caches (A-Caching;
        ``cache_interval``, ``cache_window``, ``cache_metric``, ``cache_profile_probability``:
        docs/caching.md); off by default.
        """
        if self._ordering is not None:
            raise QueryError("adapt() is given twice")
        costs = settings.get("costs")
        if isinstance(costs, Iterable) and not isinstance(costs, str | bytes | Mapping):
            settings["costs"] = tuple(costs)  # a generator is read once, here
        for name, value in settings.items():
            check_ordering_type(name, value)
        try:
            self._ordering = OrderingConfig.from_mapping({"algorithm": algorithm, **settings})
        except OrderingConfigError as exc:
            raise QueryError(f"adapt(): {exc}") from exc
        return self

    def schedule(self, policy: str = "chain", **settings: Any) -> Self:
        """How the worker shares its processor among the query's agents (Babcock et al.):
        ``chain`` (default), ``chain-flush`` (with ``latency_ms``), ``mixed`` (with ``gamma``),
        ``fifo``, ``round-robin``, ``greedy``, or ``off``; ``grant_tuples`` bounds the tuples an
        agent processes per turn. The policy can be changed at run time (``streamon control``).
        """
        if self._scheduling is not None:
            raise QueryError("schedule() is given twice")
        try:
            self._scheduling = SchedulingConfig.from_mapping({"policy": policy, **settings})
        except (SchedulingConfigError, TypeError) as exc:
            raise QueryError(f"schedule(): {exc}") from exc
        return self

    def processing_guarantee(self, guarantee: str) -> Self:
        """``"at_least_once"`` (default: a crash may repeat results, never lose them) or
        ``"exactly_once"``: every result once through crashes and rebalances, at the price of
        results leaving each hop at its commit (docs/reliability.md)."""
        if guarantee not in GUARANTEES:
            raise QueryError(
                f"processing_guarantee(): {guarantee!r} is not one of {', '.join(GUARANTEES)}"
            )
        self._guarantee = guarantee
        return self

    def join_tree(self, tree: object) -> Self:
        """Run the join as a tree of two-way symmetric window joins whose intermediate results
        are kept (Ayad & Naughton, Fig. 3) instead of one MJoin: ``"(a, b), c"`` or
        ``[["a", "b"], "c"]`` over the streams' names. The results are the same; which plan is
        cheaper depends on rates and selectivities (``streamon explain`` weighs them). A tree's
        join orders are fixed: only the MJoin adapts them."""
        try:
            self._join_tree = parse_join_tree(tree)
        except JoinTreeError as exc:
            raise QueryError(str(exc)) from None
        return self

    def shed(
        self, max_latency_ms: int, min_keep: float = 0.05, target_utilization: float = 0.8
    ) -> Self:
        """Shed load rather than fall behind (docs/shedding.md): when the input outruns the
        workers, drop boxes on the inputs keep the output latency within ``max_latency_ms``,
        keeping as much as the capacity allows (Ayad & Naughton, Sect. 5) and at least
        ``min_keep`` of every input; they are lifted when the load falls. Every share is
        logged, reported and on the status page."""
        if (
            not isinstance(max_latency_ms, int)
            or isinstance(max_latency_ms, bool)
            or (max_latency_ms < 1)
        ):
            raise QueryError(
                f"shed(): max_latency_ms must be a positive int, got {max_latency_ms!r}"
            )
        for name, value, low in (("min_keep", min_keep, 0.0), ("target_utilization",
                                  target_utilization, 0.05)):  # fmt: skip
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not (low <= value <= 1.0)
            ):
                raise QueryError(f"shed(): {name} must be a number in [{low}, 1], got {value!r}")
        self._shedding = ShedConfig(max_latency_ms, float(min_keep), float(target_utilization))
        return self

    def join_output(self, mode: str) -> Self:
        """When a join writes its results: ``"eager"`` (default) writes each result of an
        ISTREAM join of RANGE windows as soon as its last tuple arrives, in arrival order;
        ``"ordered"`` writes them in event-time order, once every input partition has passed
        their time (the STREAM papers' processing; every other join shape is ordered anyway).
        The results are the same (docs/windows-and-joins.md, "Eager joins")."""
        if mode not in JOIN_OUTPUTS:
            raise QueryError(f"join_output(): {mode!r} is not one of {', '.join(JOIN_OUTPUTS)}")
        self._join_output = mode
        return self
