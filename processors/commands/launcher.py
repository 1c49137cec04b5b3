"""Starting and stopping worker processes (demo, benchmarks, integration tests).

A worker is a separate process because Faust wants the main thread and its own event loop, and
because what users run is exactly ``streamon worker QUERY``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from processors.runtime.web_auth import ENV_WEB_TOKEN
from topics.admin import TopicError, high_watermarks


class WorkerProcess:
    """``streamon worker QUERY`` in a subprocess, with its log in a file."""

    def __init__(
        self,
        query: str | Path,
        *,
        bootstrap: str,
        state_dir: Path,
        worker_id: str,
        loglevel: str = "info",
        env: dict[str, str] | None = None,
        extra_args: list[str] | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.state_dir = state_dir
        self.log_path = state_dir / "logs" / f"{worker_id}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        environ = {
            **os.environ,
            "STREAMON_BOOTSTRAP": bootstrap,
            "STREAMON_STATE_DIR": str(state_dir),
            **(env or {}),
        }
        cmd = [sys.executable, "-m", "processors.cli", "worker", str(query), "--id", worker_id,
               "--loglevel", loglevel, *(extra_args or [])]  # fmt: skip
        with open(self.log_path, "ab") as log_file:
            self.proc = subprocess.Popen(
                cmd, env=environ, stdout=log_file, stderr=subprocess.STDOUT
            )

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 60.0) -> int:
        """Graceful stop (SIGTERM): finish in-flight events, flush, commit."""
        if self.running:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def kill(self) -> int:
        """Crash (SIGKILL): nothing is flushed or committed."""
        if self.running:
            self.proc.kill()
        return self.proc.wait()

    def info(self) -> dict[str, Any]:
        """What the running worker wrote about itself (addresses, pid, scheduling)."""
        return json.loads((self.state_dir / "workers" / f"{self.worker_id}.json").read_text())

    def page_url(self) -> str | None:
        """The address of the worker's live plan page (None: no web port, or not started)."""
        try:
            info = self.info()
        except (OSError, ValueError):
            return None
        return info.get("page_url")

    def scheduling(self) -> str | None:
        """The worker's CPU scheduling (``runtime/cpu_priority.py``; None: not started)."""
        try:
            return self.info().get("scheduling")
        except (OSError, ValueError):
            return None

    def status(self, timeout: float = 5.0) -> dict[str, Any]:
        """The worker's JSON status endpoint."""
        info = self.info()
        with urllib.request.urlopen(_request(info["status_url"]), timeout=timeout) as response:
            return json.loads(response.read())

    def metrics(self, timeout: float = 5.0) -> str:
        """The worker's Prometheus endpoint (``/metrics``), as text."""
        info = self.info()
        url = info["status_url"].replace("/streamon/status", "/metrics")
        with urllib.request.urlopen(_request(url), timeout=timeout) as response:
            return response.read().decode()

    def held_partitions(self, topic: str) -> set[int]:
        """The partitions of ``topic`` the worker's consumer holds now (its status page)."""
        held = set()
        for entry in self.status()["assignment"]:  # "topic[partition]"
            name, _, partition = entry.rpartition("[")
            if name == topic:
                held.add(int(partition.rstrip("]")))
        return held

    def wait_holding(self, topics: list[str], partitions: int, timeout: float = 120.0) -> None:
        """Until the worker holds every partition of ``topics`` (it has started, joined the
        group and restored its state: input published now is processed at once)."""
        deadline = time.monotonic() + timeout
        want = set(range(partitions))
        while time.monotonic() < deadline:
            try:
                if all(self.held_partitions(t) == want for t in topics):
                    return
            except (OSError, KeyError, ValueError):
                pass  # not serving its status page yet
            if not self.running:
                raise RuntimeError(f"worker exited:\n{self.log_tail(30)}")
            time.sleep(0.3)
        raise RuntimeError(f"the worker did not hold {topics} in {timeout} s: {self.log_path}")

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


def wait_for_count(
    bootstrap: str,
    topic: str,
    count: int,
    timeout: float,
    workers: list[WorkerProcess] | None = None,
) -> int:
    """Poll the topic's true end offsets until they add up to ``count``; return what was seen."""
    deadline = time.monotonic() + timeout
    seen = 0
    while time.monotonic() < deadline:
        try:
            seen = sum(high_watermarks(bootstrap, topic).values())
        except TopicError:  # the worker has not created it yet
            seen = 0
        if seen >= count:
            return seen
        for worker in workers or []:
            if not worker.running:
                raise RuntimeError(
                    f"worker {worker.worker_id} exited with {worker.proc.returncode}:\n"
                    f"{worker.log_tail()}"
                )
        time.sleep(0.3)
    return seen


def _request(url: str) -> urllib.request.Request:
    """A GET of a worker's endpoint, with the bearer token if STREAMON_WEB_TOKEN is set."""
    token = os.environ.get(ENV_WEB_TOKEN)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return urllib.request.Request(url, headers=headers)
