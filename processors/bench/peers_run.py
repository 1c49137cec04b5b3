"""Running one system of ``streamon bench peers`` as a subprocess, and what it cost the machine.

Each system runs in its own process tree (a peer's Python and, for Flink, its JVM), so that
peak memory and CPU time are its own. A sampler thread reads the tree's CPU time and resident
memory from /proc every 50 ms; the rate per core is the records over the CPU seconds the tree
spent inside the measured window (interpolated between samples), so start-up and the other
engineers' processes on this shared machine do not count. A program reports its result as one
line ``RESULT {json}`` on stdout: JSON only, nothing executable crosses the boundary.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            text = Path(f"/proc/{pid}/task/{tid}/children").read_text()
            out.extend(int(x) for x in text.split())
    except OSError:
        pass
    return out


def tree_usage(root: int) -> tuple[float, int]:
    """CPU seconds (user + system, live processes of the tree) and resident bytes of ``root``
    and its descendants."""
    cpu, rss, todo = 0.0, 0, [root]
    while todo:
        pid = todo.pop()
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            cpu += (int(fields[11]) + int(fields[12])) / _TICK
            rss += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
        except (OSError, ValueError, IndexError):
            continue
        todo.extend(_children(pid))
    return cpu, rss


class Sampler:
    """Samples a process tree's CPU time and memory until :meth:`stop`."""

    def __init__(self, pid: int, every: float = 0.05) -> None:
        self.pid, self.every = pid, every
        self.samples: list[tuple[float, float, int]] = []  # (epoch s, cpu s, rss bytes)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            cpu, rss = tree_usage(self.pid)
            if rss:
                self.samples.append((time.time(), cpu, rss))
            self._stop.wait(self.every)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def cpu_at(self, t: float) -> float:
        """The tree's CPU seconds at epoch ``t`` (linear between samples)."""
        s = self.samples
        if not s:
            return 0.0
        if t <= s[0][0]:
            return s[0][1]
        for (t0, c0, _), (t1, c1, _) in zip(s, s[1:], strict=False):
            if t0 <= t <= t1:
                return c0 + (c1 - c0) * (t - t0) / max(t1 - t0, 1e-9)
        return max(c for _, c, _ in s)

    def cpu_between(self, t0: float, t1: float) -> float:
        return max(self.cpu_at(t1) - self.cpu_at(t0), 0.0)

    @property
    def peak_rss_mb(self) -> float:
        return max((r for _, _, r in self.samples), default=0) / 2**20


def figures(records: int, t0: float, t1: float, sampler: Sampler, launched: float,
            ready: float) -> dict[str, Any]:  # fmt: skip
    """Rate, rate per core, peak memory and start-up of a measured window [t0, t1] (epoch s)."""
    span = max(t1 - t0, 1e-6)
    cpu = sampler.cpu_between(t0, t1)
    return {
        "rate": records / span,
        "span_s": span,
        "cpu_s": cpu,
        "cores_used": cpu / span,
        "rate_per_core": records / cpu if cpu > 0.01 else None,
        "peak_rss_mb": sampler.peak_rss_mb,
        "startup_s": max(ready - launched, 0.0),
    }


def run_program(
    argv: Sequence[str], timeout: float, log: Path,
    window: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Run a program that prints ``RESULT {json}`` with ``records``, ``t_ready``, ``t0``,
    ``t1`` (epoch seconds) and its answer; returns that JSON with :func:`figures` added.
    ``window``, if given, may replace those fields after the run (from what the program wrote
    to Kafka). Raises RuntimeError with the tail of its output when it fails."""
    launched = time.time()
    with log.open("w") as out:
        proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT)
        sampler = Sampler(proc.pid)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = -9
        finally:
            sampler.stop()
    text = log.read_text(errors="replace")
    lines = [ln for ln in text.splitlines() if ln.startswith("RESULT ")]
    if code != 0 or not lines:
        tail = "\n".join(text.splitlines()[-15:])
        why = "timed out" if code == -9 else f"exit code {code}"
        raise RuntimeError(f"{argv[-1] if argv else '?'}: {why}; log {log}:\n{tail}")
    result = json.loads(lines[-1][len("RESULT ") :])
    if window is not None:
        result.update(window(result))
    result.update(
        figures(
            result["records"], result["t0"], result["t1"], sampler, launched, result["t_ready"]
        )  # fmt: skip
    )
    return result


def run_worker_until(
    query: Path,
    bootstrap: str,
    state: Path,
    worker_id: str,
    out: str,
    count: int,
    timeout: float,
    settle_s: float = 0.0,
) -> tuple[float, Sampler]:
    """A streamon worker on ``query``, stopped once ``out`` holds ``count`` records (and, with
    ``settle_s``, once no more came for that long); its launch time and its CPU/RSS sampler."""
    from processors.commands.launcher import WorkerProcess, wait_for_count

    launched = time.time()
    worker = WorkerProcess(query, bootstrap=bootstrap, state_dir=state, worker_id=worker_id,
                           loglevel="warn")  # fmt: skip
    sampler = Sampler(worker.proc.pid)
    try:
        seen = wait_for_count(bootstrap, out, count, timeout, workers=[worker])
        if seen < count:
            raise RuntimeError(f"streamon delivered {seen} of {count}; see {worker.log_path}")
        while settle_s and (more := wait_for_count(bootstrap, out, 1 << 60, settle_s)) > seen:
            seen = more
    finally:
        worker.stop()
        sampler.stop()
    return launched, sampler


@contextmanager
def scratch_broker(prefix: str) -> Iterator[tuple[Any, Path]]:
    """A fresh embedded broker in a temporary directory, stopped and removed on exit: yields
    its info (``.bootstrap``) and the directory, for the systems' own scratch files."""
    from processors.runtime.broker import start_broker, stop_broker

    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        broker_dir = Path(tmp) / "broker"
        broker_dir.mkdir()
        info = start_broker(broker_dir)
        try:
            yield info, Path(tmp)
        finally:
            stop_broker(broker_dir)
