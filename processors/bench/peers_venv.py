"""The peers' own virtualenv, made by ``streamon bench peers`` on first use.

Apache Flink's Python package pins many packages (numpy, pandas, pyarrow, protobuf, ...) that
streamon's runtime must not be held to, so the peers live apart: ``.streamon/peers-venv``,
created with ``python3 -m venv`` and the pinned versions below, and their programs
(processors/bench/peer_programs) run as subprocesses of the bench with that venv's Python.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

#: the peers and their versions (every figure in docs/benchmarks.md names these)
PINS = (
    "apache-flink==2.3.0",
    "quixstreams==3.28.1",
    "faust-streaming==0.15.3",
    "fastavro==1.13.1",
    "uvloop==0.23.0",
)
PROGRAMS = Path(__file__).resolve().parent / "peer_programs"


def default_venv() -> Path:
    return Path(".streamon") / "peers-venv"


def peer_python(venv: Path | None = None, create: bool = True) -> Path:
    """The peer venv's Python, the venv made (and the pins installed) if it is missing."""
    venv = (venv or default_venv()).resolve()
    python = venv / "bin" / "python"
    marker = venv / "streamon-pins.txt"
    wanted = "\n".join(PINS)
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return python
    if not create:
        raise FileNotFoundError(f"no peer virtualenv at {venv}")
    print(f"[bench] making the peers' virtualenv {venv} ({', '.join(PINS)})", flush=True)
    if not python.exists():
        subprocess.run(["python3", "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *PINS], check=True,
                   stdout=sys.stdout, stderr=sys.stderr)  # fmt: skip
    marker.write_text(wanted)
    return python


def java_version() -> str:
    """``java -version``'s first line (Flink needs Java 17), or why there is none."""
    try:
        done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"no java: {exc}"
    return (done.stderr or done.stdout).splitlines()[0] if (done.stderr or done.stdout) else "?"
