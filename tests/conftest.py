"""Fixtures and markers every test folder shares.

Folder markers are set here, in one place, so that `-m "not integration"`, `-m "not slow"` and
`-m "not experiments"` select by folder without each test file repeating it. Tests that are slow
for a reason of their own carry `@pytest.mark.slow` (or a module `pytestmark`) in their file,
next to the measured time that put them there.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from processors.runtime.broker import BrokerInfo, start_broker, stop_broker

_HERE = Path(__file__).parent

# folder under tests/ -> the markers every test in it gets
FOLDER_MARKERS: dict[str, tuple[str, ...]] = {
    # a private broker and real worker processes: tens of seconds per test
    "integration": ("integration", "slow"),
    # the fault-injection suite: crashes, rebalances, broker cuts (docs/reliability.md)
    "faults": ("integration", "slow", "faults"),
    # the paper-reproduction experiments and their pure parts
    "experiments": ("experiments",),
}

# STREAMON_* settings a developer's shell may hold that would change what a command does
SETTINGS_ENV = ("STREAMON_BOOTSTRAP", "STREAMON_SCHEMA_REGISTRY_URL", "STREAMON_CONFIG")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by the tests/ folder it lives in (see FOLDER_MARKERS)."""
    for item in items:
        try:
            folder = Path(str(item.path)).relative_to(_HERE).parts[0]
        except ValueError:  # a test outside tests/ (run by explicit path)
            continue
        for name in FOLDER_MARKERS.get(folder, ()):
            item.add_marker(getattr(pytest.mark, name))


@pytest.fixture
def no_local_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cwd and no STREAMON_* settings from the environment, so that neither a
    developer's ./streamon.toml nor their shell leaks into a test; returns the cwd."""
    for name in SETTINGS_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="session")
def broker_info(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerInfo]:
    """A private tansu broker (own state dir, free port), never one a developer left running;
    started only by the tests that need one (integration and faults)."""
    state_dir = tmp_path_factory.mktemp("broker")
    info = start_broker(state_dir)
    try:
        yield info
    finally:
        stop_broker(state_dir)


@pytest.fixture(scope="session")
def bootstrap(broker_info: BrokerInfo) -> str:
    """bootstrap.servers of the session's private broker."""
    return broker_info.bootstrap


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name no other test (or earlier run against the same broker) uses."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-")[:80]
    return f"it-{stem}-{uuid.uuid4().hex[:8]}"
