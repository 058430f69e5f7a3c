"""Fixtures for running a real Claude Code against the fake Messages API.

Every test here needs the binary: `claude` installs it once per machine (see
tests/realclaude.py) or skips the test with the reason. What the runs showed
(version, directory names, which MEMORY.md reached the model, timings) is
collected in `ground_truth` and printed in pytest's terminal summary.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import summary_lines
from tests.fakeapi import FakeAnthropic, text
from tests.realclaude import ClaudeInstall, claude_or_skip

GROUND_TRUTH: list[str] = summary_lines("Claude Code ground truth")  # printed by tests/conftest.py


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "realclaude: runs a real Claude Code binary (skipped when unavailable)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.path).parents:
            item.add_marker(pytest.mark.realclaude)
            item.add_marker(pytest.mark.slow)
            # one worker runs every real Claude Code, one at a time: two of them at once on two cores push
            # `memd mcp` past print mode's ~2 s start-up window (issue 22), whatever memd does
            item.add_marker(pytest.mark.xdist_group("claude"))


@pytest.fixture(scope="session")
def claude() -> ClaudeInstall:
    """The Claude Code to run (installed once into ~/.cache/memd-test), or skip."""
    found = claude_or_skip()
    GROUND_TRUTH.append(f"Claude Code {found.version} at {found.bin}")
    return found


@pytest.fixture
def ground_truth() -> list[str]:
    return GROUND_TRUTH


@pytest.fixture
def fake_api() -> Iterator[FakeAnthropic]:
    """The fake API; answers "OK from fake" unless the test scripts more."""
    with FakeAnthropic(default=text("OK from fake")) as api:
        yield api


@pytest.fixture
def claude_home(tmp_path: Path) -> Path:
    """A temporary HOME whose `.claude` is the config dir of the run."""
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    return home
