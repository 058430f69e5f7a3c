"""Counts the fault suite reports (crashes survived, inputs tried, refusals).

Tests add to `fault_report`; at the end the totals are printed in pytest's
terminal summary and written as JSON to $MEMD_FAULTS_REPORT (default:
<tmp>/memd-faults-report.json), from which bench/RESULTS.md is filled in.
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.conftest import summary_counts, summary_lines

REPORT: Counter[str] = summary_counts("memd under faults")  # printed and written by tests/conftest.py
NOTES: list[str] = summary_lines("memd under faults")


@pytest.fixture
def fault_report() -> Counter[str]:
    return REPORT


@pytest.fixture
def fault_notes() -> list[str]:
    return NOTES

