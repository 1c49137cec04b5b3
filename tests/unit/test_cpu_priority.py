"""The worker's opt-in real-time scheduling (processors/runtime/cpu_priority.py).

Each case runs in a fresh interpreter: the policy would otherwise stay on the test process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = """
import json, os, threading
from processors.runtime.cpu_priority import current_scheduling, request_realtime
before = current_scheduling()
got = request_realtime({priority})
seen = {{}}
def later():  # a thread started afterwards inherits the policy
    seen["thread"] = current_scheduling()
t = threading.Thread(target=later); t.start(); t.join()
print(json.dumps({{"before": before, "got": got, "after": current_scheduling(), **seen}}))
"""


def _probe(priority: int = 5) -> dict[str, str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(priority=priority)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _permitted() -> bool:
    return hasattr(os, "sched_setscheduler") and os.geteuid() == 0


@pytest.mark.skipif(not _permitted(), reason="needs root for SCHED_RR")
def test_realtime_reaches_every_thread_when_permitted() -> None:
    seen = _probe(5)
    assert seen == {
        "before": "normal",
        "got": "SCHED_RR 5",
        "after": "SCHED_RR 5",
        "thread": "SCHED_RR 5",
    }


def test_a_refusal_is_reported_and_the_process_keeps_running() -> None:
    # priority 0 is not a valid SCHED_RR priority: refused like a missing privilege
    seen = _probe(0)
    assert seen["got"].startswith("normal (")
    assert seen["after"] == "normal" and seen["thread"] == "normal"
