"""compose/Dockerfile's install steps, run in a clean virtualenv (issue 20).

No container runtime runs here, so the image itself is never built: this test does what its
``worker`` stage does to install streamon. It reads the stage's ENV, WORKDIR, COPY and
``RUN ... pip install`` instructions, copies exactly the COPY'd paths of the repository (the
build context) into a temporary WORKDIR, makes a new virtualenv (``python -m venv``, standing
in for the image's Python) and runs the same pip command there, with the stage's ENV. Then,
from a folder outside the repository, it checks what the image's entry point needs: that
``streamon --help`` runs, that the packages are imported from the venv and not the checkout,
and that the package data is installed: every Avro schema (loaded by name, as a worker loads
``stats``), the plan page's files, the CQL workloads, every module of processors, topics and
spark_bridge; and that the compose query plans with the installed package.

What is not checked: the base image, the non-root user and the ``spark`` target's Java
(tests/unit/test_compose.py reads those). A full install takes about 80 s here (pyspark is
built from its sdist): slow, as is everything in tests/integration.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "compose" / "Dockerfile"
STAGE = "worker"
#: the non-Python files the image needs, by suffix (pyproject's package-data)
DATA_SUFFIXES = {".avsc", ".cql", ".toml", ".html", ".js", ".css"}


@dataclass
class InstallSteps:
    """What one Dockerfile stage does to install the project."""

    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    copies: list[tuple[list[str], str]] = field(default_factory=list)  # (sources, destination)
    pip_runs: list[list[str]] = field(default_factory=list)  # argv of each pip install


def instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) of each instruction, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(
        line for line in text.splitlines() if not line.lstrip().startswith("#")
    ))  # fmt: skip
    out = []
    for line in joined.splitlines():
        if line.strip():
            keyword, _, rest = line.strip().partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def install_steps(text: str, stage: str) -> InstallSteps:
    """The ENV, WORKDIR, COPY and pip RUN steps of ``stage`` (``FROM ... AS stage``)."""
    steps, current = InstallSteps(), None
    for keyword, rest in instructions(text):
        if keyword == "FROM":
            current = rest.split()[-1] if " AS " in rest.upper() else None
        elif current != stage:
            continue
        elif keyword == "ENV":
            steps.env.update(dict(part.split("=", 1) for part in shlex.split(rest)))
        elif keyword == "WORKDIR":
            steps.workdir = rest
        elif keyword == "COPY":
            *sources, dest = shlex.split(rest)
            assert not any(s.startswith("--") for s in sources), f"COPY flags not handled: {rest}"
            steps.copies.append((sources, dest))
        elif keyword == "RUN" and "pip install" in rest:
            steps.pip_runs.extend(
                shlex.split(cmd) for cmd in rest.split("&&") if "pip install" in cmd
            )
    return steps


def copy_context(steps: InstallSteps, workdir: Path) -> list[Path]:
    """COPY each source of the build context (the repository) as Docker does, into
    ``workdir`` standing for the stage's WORKDIR; returns what was copied. Python's bytecode
    caches of this checkout are left out (they are not in the repository)."""
    copied = []
    for sources, dest in steps.copies:
        target = workdir / dest
        for source in sources:
            src = REPO / source
            assert src.exists(), f"COPY {source}: not in the repository"
            if src.is_dir():  # a folder's contents go into the destination
                shutil.copytree(src, target, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))  # fmt: skip
                copied.append(target)
            else:  # into a folder if the destination ends with "/", else as that file
                to = target / src.name if dest.endswith("/") else target
                to.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, to)
                copied.append(to)
    return copied


def image_env(steps: InstallSteps, root: Path) -> dict[str, str]:
    """This environment less the checkout's own venv and path, plus the stage's ENV with its
    absolute paths moved under ``root`` (where the container's filesystem would be)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    for name, value in steps.env.items():
        env[name] = str(root / value.lstrip("/")) if value.startswith("/") else value
    return env


def run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout[-3000:]}\n" \
        f"{done.stderr[-3000:]}"  # fmt: skip
    return done.stdout


def test_the_parser_reads_the_worker_stage() -> None:
    """The steps this test runs are the Dockerfile's (not a copy of them that could drift)."""
    steps = install_steps(DOCKERFILE.read_text(), STAGE)
    assert steps.workdir == "/opt/streamon"
    assert ["pyproject.toml", "README.md"] in [s for s, _ in steps.copies]
    assert {d for _, d in steps.copies} >= {"./processors", "./topics", "./schemas"}
    assert steps.pip_runs == [["python", "-m", "pip", "install", "--no-cache-dir", "."]]
    assert steps.env["PIP_NO_CACHE_DIR"] == "1"


def test_the_dockerfile_install_steps_work_in_a_clean_virtualenv(tmp_path: Path) -> None:
    steps = install_steps(DOCKERFILE.read_text(), STAGE)
    root = tmp_path / "root"  # the container's filesystem
    workdir = root / steps.workdir.lstrip("/")
    workdir.mkdir(parents=True)
    copied = copy_context(steps, workdir)
    env = image_env(steps, root)
    venv = tmp_path / "venv"
    try:
        check_install(steps, workdir, copied, env, venv, tmp_path)
    finally:  # 1.3 GB (pyspark, numba, ...): not left in pytest's kept temporary folders
        shutil.rmtree(venv, ignore_errors=True)


def check_install(
    steps: InstallSteps, workdir: Path, copied: list[Path], env: dict[str, str], venv: Path,
    tmp_path: Path,
) -> None:  # fmt: skip
    """Make ``venv``, run the stage's pip steps in ``workdir`` and check what they installed."""
    run([sys.executable, "-m", "venv", str(venv)], tmp_path, env, 120)
    python, bin_dir = venv / "bin" / "python", venv / "bin"
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    for argv in steps.pip_runs:  # the image's `python` is the venv's
        run([str(python), *argv[1:]] if argv[0].startswith("python") else argv, workdir, env, 900)

    elsewhere = tmp_path / "elsewhere"  # not the repository, not WORKDIR: no source on sys.path
    elsewhere.mkdir()
    assert "usage: streamon" in run([str(bin_dir / "streamon"), "--help"], elsewhere, env, 120)
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                     "['purelib'])"], elsewhere, env, 60).strip())  # fmt: skip
    where = run([str(python), "-c", "import processors, topics, spark_bridge, topics.avro as a; "
                 "print(processors.__file__, topics.__file__, spark_bridge.__file__, "
                 "a.project_schemas_dir())"], elsewhere, env, 60).split()  # fmt: skip
    assert all(Path(p).is_relative_to(site) for p in where), (where, site)

    # every module and data file of the copied packages (and the schemas) is installed
    packages = [p for p in copied if p.is_dir()]
    assert {p.name for p in packages} >= {"processors", "topics", "spark_bridge", "schemas"}
    wanted = [
        f.relative_to(workdir)
        for p in packages
        for f in p.rglob("*")
        if f.is_file() and (f.suffix == ".py" or f.suffix in DATA_SUFFIXES)
    ]
    missing = [str(f) for f in wanted if not (site / f).is_file()]
    assert not missing, f"not installed: {missing}"
    schemas = sorted(f.stem for f in (REPO / "schemas").glob("*.avsc"))
    assert {"stats", "control", "dead_letter"} <= set(schemas)
    web = ["index.html", "plan.js", "charts.js", "plan.css"]
    check = (
        "import sys; from topics.avro import load_schema; "
        "from processors.runtime.web_pages import STATIC_PACKAGE; "
        "from importlib import resources; "
        f"[load_schema(n) for n in {schemas!r}]; "
        f"print(all(resources.files(STATIC_PACKAGE).joinpath(n).is_file() for n in {web!r}))"
    )
    assert run([str(python), "-c", check], elsewhere, env, 120).strip() == "True"
    # the compose worker's query (it loads the `reading` schema) plans with the installed package
    plan = run([str(bin_dir / "streamon"), "plan", str(REPO / "compose" / "queries" / "query.py")],
               elsewhere, env, 120)  # fmt: skip
    assert '"topic": "readings"' in plan
