"""Fixtures and markers every test folder shares.

Folder markers are set here, in one place, so that `-m "not integration"`, `-m "not slow"` and
`-m "not experiments"` select by folder without each test file repeating it. Tests that are slow
for a reason of their own carry `@pytest.mark.slow` (or a module `pytestmark`) in their file,
next to the measured time that put them there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).parent

# folder under tests/ -> the markers every test in it gets
FOLDER_MARKERS: dict[str, tuple[str, ...]] = {
    # a private broker and real worker processes: tens of seconds per test
    "integration": ("integration", "slow"),
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
