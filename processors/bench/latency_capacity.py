"""The sustained capacity for ``streamon bench latency``: the highest paced rate a worker keeps
up with, as stream-processing benchmarks define it (the highest load the system handles
without an event-time lag that keeps growing: Karimov et al., "Benchmarking Distributed Stream
Data Processing Systems", ICDE 2018).

A burst drained from a backlog measures something else: the worker then takes its input in the
largest blocks it can, and a paced input at that rate comes in smaller ones, each turn paying
its per-call costs. On the 2-vCPU VM one burst's figure also moved up to fivefold between runs
(docs/benchmarks.md). So the paced rates climb a staircase, each step ``STEP_S`` seconds, and
at the middle and the end of each the output's lag is read: the wall-clock time now less the
newest input time the latest result records reflect (the paced records' event time is their
publish time). A step is kept up with when the lag at its end is under ``LAG_LIMIT_MS`` and grew
over its second half by less than a tenth of that half (the input waiting grew by less than a
tenth of what came in: the shedding experiment's rule, docs/shedding.md). A failed step is run
again at the same rate once the worker has caught up; a second failure ends the staircase (a
failure alone is a stall, not the capacity), and the capacity is the geometric mean of the last
rate kept up with and the rate that failed twice.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from processors.experiments.shedding_live_run import CONFIRM_FAILS, capacity_of
from topics.admin import tail_windows
from topics.avro import SchemaStore, decode_single_object

STEP_S = 5.0
#: each step offers this much more than the one before
STEP_FACTOR = 1.25
#: the staircase starts at this share of the burst capacity and stops above STOP_AT of it
START_AT, STOP_AT = 0.15, 1.25
#: the lag over which a step is not kept up with (about ten times the join's at low rates)
LAG_LIMIT_MS = 1_000.0
#: result records read from the end of each partition for a lag
TAIL_RECORDS = 500


def output_lag_ms(
    bootstrap: str, result: str, partitions: int, newest: tuple[str, ...], schema: dict
) -> float:
    """How far the output trails the input, read while the input flows: for each partition,
    the time its read ended less the newest input time its last ``TAIL_RECORDS`` result
    records reflect; the least of those (a read takes a second or so under load, and the
    records written meanwhile are newer than its start). A worker that stopped writing shows
    a growing lag too."""
    store = SchemaStore(load=False)
    store.add(schema)
    lag = float("inf")
    for partition in range(partitions):
        window = next(iter(tail_windows(bootstrap, result, partition, first=TAIL_RECORDS)), [])
        read_ms = time.time() * 1000.0
        latest = max(
            (int(row[f]) for r in window if r.value is not None
             for row in [decode_single_object(r.value, schema, store)] for f in newest),
            default=None,
        )  # fmt: skip
        if latest is not None:
            lag = min(lag, read_ms - latest)
    return lag


class Pacer:
    """Publishes ``rate`` records a second (the caller changes it) on a thread until stopped:
    the staircase's input never pauses, so that a lag read at any time is the worker's."""

    def __init__(self, publish: Callable[[int, int], None], tick_s: float = 0.01) -> None:
        """``publish(n, now_ms)`` writes ``n`` records of event time ``now_ms``."""
        self.rate = 0.0
        self._publish, self._tick_s = publish, tick_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-pace", daemon=True)

    def __enter__(self) -> Pacer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        last, owed = time.time(), 0.0
        while not self._stop.is_set():
            now = time.time()
            owed, last = owed + self.rate * (now - last), now
            if owed >= 1:
                self._publish(int(owed), int(now * 1000))
                owed -= int(owed)
            time.sleep(self._tick_s)


def sustained_capacity(
    set_rate: Callable[[float], None],
    lag_ms: Callable[[], float],
    drain: Callable[[], None],
    burst_capacity: float,
    step_s: float = STEP_S,
) -> tuple[float, list[dict[str, Any]]]:
    """Climb the paced rates from ``START_AT`` of ``burst_capacity`` (``set_rate`` changes
    what a :class:`Pacer` offers; ``lag_ms()`` reads the output's lag); the capacity and every
    step. A step not kept up with is tried again once, after ``drain()`` (the input stopped,
    the worker caught up): a stall passes then; two failures end the climb (climbing on
    past a failure left the join worker seconds of input behind, over its memory limit)."""
    steps: list[dict[str, Any]] = []
    rate = START_AT * burst_capacity
    while rate <= STOP_AT * burst_capacity:
        step = _step(set_rate, lag_ms, rate, step_s)
        steps.append(step)
        if not step["kept_up"]:
            set_rate(0.0)
            drain()
            if len(steps) >= CONFIRM_FAILS and not any(
                s["kept_up"] for s in steps[-CONFIRM_FAILS:]
            ):
                break
            continue  # the same rate again
        rate *= STEP_FACTOR
    set_rate(0.0)
    if not any(s["kept_up"] for s in steps):
        return float(steps[0]["rate"]) / STEP_FACTOR, steps  # below the first step: a guess
    return capacity_of(steps), steps


def _step(
    set_rate: Callable[[float], None], lag_ms: Callable[[], float], rate: float, step_s: float
) -> dict[str, Any]:
    """One step of the staircase: ``rate`` for ``step_s``, the lag read at its middle and its
    end, and whether it was kept up with."""
    set_rate(rate)
    began = time.monotonic()
    time.sleep(max(began + step_s / 2 - time.monotonic(), 0.0))
    middle, at_middle = lag_ms(), time.monotonic()
    time.sleep(max(began + step_s - time.monotonic(), 0.0))
    end = lag_ms()
    allowed = 0.1 * (time.monotonic() - at_middle) * 1000.0  # a tenth of the time between
    kept_up = end < LAG_LIMIT_MS and end - middle < allowed
    return {"rate": round(rate), "lag_middle_ms": _ms(middle), "lag_end_ms": _ms(end),
            "kept_up": kept_up}  # fmt: skip


def _ms(value: float) -> float | None:
    return None if not np.isfinite(value) else round(value)
