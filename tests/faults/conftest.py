"""Counts the fault suite reports (crashes survived, inputs tried, refusals).

Tests add to `fault_report`; at the end the totals are printed in pytest's
terminal summary and written as JSON to $MEMD_FAULTS_REPORT (default:
<tmp>/memd-faults-report.json), from which bench/RESULTS.md is filled in.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

REPORT: Counter[str] = Counter()
NOTES: list[str] = []


@pytest.fixture
def fault_report() -> Counter[str]:
    return REPORT


@pytest.fixture
def fault_notes() -> list[str]:
    return NOTES


def report_path() -> Path:
    return Path(os.environ.get("MEMD_FAULTS_REPORT") or Path(tempfile.gettempdir()) / "memd-faults-report.json")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not REPORT and not NOTES:
        return
    terminalreporter.section("memd under faults")
    for k in sorted(REPORT):
        terminalreporter.write_line(f"{k}: {REPORT[k]}")
    for n in NOTES:
        terminalreporter.write_line(f"note: {n}")
    try:
        report_path().write_text(json.dumps({"counts": dict(sorted(REPORT.items())), "notes": NOTES}, indent=1) + "\n")
    except OSError:
        pass
