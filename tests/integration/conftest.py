"""Integration fixtures: one private embedded broker per test session, unique topic names."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest

from processors.runtime.broker import BrokerInfo, start_broker, stop_broker

# tests/conftest.py marks every test here `integration` and `slow` (FOLDER_MARKERS)


@pytest.fixture(scope="session")
def broker_info(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerInfo]:
    """A private tansu broker (own state dir, free port), never one a developer left running."""
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
