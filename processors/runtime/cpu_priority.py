"""Real-time CPU scheduling for a worker that shares its cores (opt-in: ``--realtime``).

A worker's output latency is a chain of wake-ups: the consumer thread gets a fetch response,
the event loop takes the records, an agent runs, the producer's thread sends. On a machine
whose cores the worker shares with the broker or the producers (the 2-core machine where
streamon is developed and benchmarked runs all three), each wake-up may wait for the
scheduler to give the thread a core, and a p99 is made of such waits, not of work
(docs/benchmarks.md, `bench latency`, eighth pass). ``SCHED_RR`` lets the worker's threads
run as soon as they are runnable; the kernel's real-time throttling
(``/proc/sys/kernel/sched_rt_runtime_us``, 95% by default) still leaves every core's
remainder to the other processes. It needs the privilege to raise priority (root or
``CAP_SYS_NICE``): without it the worker runs as before and says so.

Not for a worker that runs saturated beside its broker: it then takes the cores the broker
needs to serve it (the shedding experiment's overload, measured: p99 4.2 s against 0.3 s).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

#: a low real-time priority: above every ordinary process, below the kernel's own threads
DEFAULT_RT_PRIORITY = 5

NORMAL = "normal"


def request_realtime(priority: int = DEFAULT_RT_PRIORITY) -> str:
    """Put every thread of this process under ``SCHED_RR`` at ``priority``; threads started
    later inherit it. Returns what the worker runs with: ``"SCHED_RR <priority>"``, or
    ``"normal (<why>)"`` when the system does not allow it (logged as a warning)."""
    setter = getattr(os, "sched_setscheduler", None)
    policy = getattr(os, "SCHED_RR", None)
    if setter is None or policy is None:
        return _refused("this platform has no real-time scheduling")
    param = os.sched_param(priority)
    try:
        setter(0, policy, param)  # the calling thread: what it starts inherits the policy
        for tid in _thread_ids():
            try:
                setter(tid, policy, param)
            except ProcessLookupError:  # the thread ended meanwhile
                continue
    except PermissionError:
        return _refused("not permitted: needs root or CAP_SYS_NICE")
    except OSError as exc:
        return _refused(str(exc))
    log.info("worker threads run under SCHED_RR, priority %d", priority)
    return f"SCHED_RR {priority}"


def current_scheduling() -> str:
    """The calling thread's scheduling, as :func:`request_realtime` names it."""
    getter = getattr(os, "sched_getscheduler", None)
    if getter is None or getter(0) != getattr(os, "SCHED_RR", None):
        return NORMAL
    return f"SCHED_RR {os.sched_getparam(0).sched_priority}"


def _thread_ids() -> list[int]:
    tasks = Path(f"/proc/{os.getpid()}/task")
    if not tasks.is_dir():
        return []
    return [int(name) for name in os.listdir(tasks) if name.isdigit()]


def _refused(reason: str) -> str:
    log.warning("--realtime: the worker keeps normal scheduling (%s)", reason)
    return f"{NORMAL} ({reason})"
