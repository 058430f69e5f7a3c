"""Shared fixtures: a home laid out from the real corpus, and a temporary home."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

REPO = Path(__file__).resolve().parents[1]

# Property tests on a loaded CI machine: no per-example deadline (hypothesis's 200 ms default failed
# examples that were merely slow there), no "too slow" health check for the same reason, and the same
# examples on every run, so CI never fails on an input no change brought in. MEMD_TEST_RANDOM=1
# explores new examples, as a fuzzing session by hand should. Explicit @settings still override.
hypothesis_settings.register_profile(
    "memd", deadline=None, suppress_health_check=[HealthCheck.too_slow],
    derandomize=os.environ.get("MEMD_TEST_RANDOM", "") in ("", "0"),
)  # fmt: skip
hypothesis_settings.load_profile("memd")
# memd.index.hold: every daemon the suite starts (a process, or `memd run` in a forked child) rewrites
# MEMORY.md at once; the tests of the hold take this away (monkeypatch, or "" in a daemon's env).
os.environ.setdefault("MEMD_TEST_AGENT_QUIET_SECONDS", "0")
# memd.agent.hookwire: the hook socket's waits (0.3 s for the daemon's "ok", 2 s for its answer) get 5 s more in
# the suite, so a loaded CI machine does not turn a daemon's answer into the hook's own; the tests of those
# waits set "0" (in the daemon's and the hook's environment alike).
os.environ.setdefault("MEMD_TEST_HOOK_SLACK_S", "5")
CORPUS = Path(os.environ.get("MEMD_CORPUS", REPO.parent / "shared" / "corpus" / "claude-code"))


def corpus_sessions() -> list[Path]:
    """Main transcripts of the corpus (sub-agent files excluded)."""
    if not CORPUS.is_dir():
        return []
    return sorted(
        p for p in CORPUS.rglob("*.jsonl") if "subagents" not in p.parts
    )


def require_corpus() -> None:
    if not CORPUS.is_dir():
        pytest.skip(f"corpus folder {CORPUS} is absent (it lives in ../shared beside the clone)")


def lay_out_corpus(home: Path) -> Path:
    """The corpus as a home: each corpus folder becomes one project."""
    require_corpus()
    projects = home / "projects"
    projects.mkdir(parents=True, exist_ok=True)
    for d in sorted(CORPUS.iterdir()):
        if d.is_dir():
            shutil.copytree(d, projects / f"-corpus-{d.name}")
    return home


@pytest.fixture(scope="session")
def corpus_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A read-only-by-convention corpus home shared by tests that only read it."""
    return lay_out_corpus(tmp_path_factory.mktemp("corpus-home"))


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    (h / "projects").mkdir(parents=True)
    return h


def memd_cmd() -> list[str]:
    """The installed `memd` of this interpreter's environment."""
    exe = Path(sys.executable).with_name("memd")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "memd"]


# --- what tests report at the end, from every xdist worker -----------------------------------
# Sections of the terminal summary ("memd under faults", "Claude Code ground truth"): tests add
# lines and counts in whichever process runs them; each worker leaves its share in a directory
# the controller made, and the controller prints the whole (and the faults report as JSON).

SUMMARY_LINES: dict[str, list[str]] = {}
SUMMARY_COUNTS: dict[str, Counter[str]] = {}
_SUMMARY_DIR = "MEMD_TEST_SUMMARY_DIR"


def summary_lines(section: str) -> list[str]:
    return SUMMARY_LINES.setdefault(section, [])


def summary_counts(section: str) -> Counter[str]:
    return SUMMARY_COUNTS.setdefault(section, Counter())


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and _SUMMARY_DIR not in os.environ:
        os.environ[_SUMMARY_DIR] = tempfile.mkdtemp(prefix="memd-test-summary-")


def pytest_sessionfinish(session: pytest.Session) -> None:
    worker = getattr(session.config, "workerinput", {}).get("workerid")
    if worker and os.environ.get(_SUMMARY_DIR):
        data = {"lines": SUMMARY_LINES, "counts": {k: dict(v) for k, v in SUMMARY_COUNTS.items()}}
        (Path(os.environ[_SUMMARY_DIR]) / f"{worker}.json").write_text(json.dumps(data))


def _merged() -> tuple[dict[str, list[str]], dict[str, Counter[str]]]:
    lines = {k: list(v) for k, v in SUMMARY_LINES.items()}
    counts = {k: Counter(v) for k, v in SUMMARY_COUNTS.items()}
    folder = Path(os.environ.get(_SUMMARY_DIR) or "/nonexistent")
    for f in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        data = json.loads(f.read_text())
        for k, v in data["lines"].items():
            lines.setdefault(k, []).extend(v)
        for k, v in data["counts"].items():
            counts.setdefault(k, Counter()).update(v)
    return lines, counts


def faults_report_path() -> Path:
    return Path(os.environ.get("MEMD_FAULTS_REPORT") or Path(tempfile.gettempdir()) / "memd-faults-report.json")


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    lines, counts = _merged()
    for section in sorted(set(lines) | set(counts)):
        got, seen = counts.get(section, Counter()), set()
        if not got and not lines.get(section):
            continue
        terminalreporter.section(section)
        for k in sorted(got):
            terminalreporter.write_line(f"{k}: {got[k]}")
        prefix = "note: " if section == "memd under faults" else ""
        for line in lines.get(section, []):
            if line not in seen:
                seen.add(line)
                terminalreporter.write_line(prefix + line)
    if "memd under faults" in lines or "memd under faults" in counts:
        notes = lines.get("memd under faults", [])
        try:
            faults_report_path().write_text(json.dumps({"counts": dict(sorted(counts.get("memd under faults", Counter()).items())),
                                                        "notes": notes}, indent=1) + "\n")  # fmt: skip
        except OSError:
            pass


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tests first (a stable sort): on two workers the long kill loops and real Claude Code
    runs then overlap the many short tests instead of ending the run alone."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
