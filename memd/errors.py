"""Expected failures carry their exit code; the CLI prints their one line and exits.

| code | meaning |
|---:|---|
| 0 | ok |
| 1 | error (a job failed, state unreadable, …) |
| 2 | usage (bad arguments, unknown session or job) |
| 3 | already running (a second `memd run` on one home) |
| 4 | model API (no key, budget reached, calls failing) |
| 5 | configuration (`memd config --check` found problems) |
| 75 | busy (a lock could not be taken in time; try again) |
"""

from __future__ import annotations


class MemdError(Exception):
    exit_code = 1


class UsageError(MemdError):
    exit_code = 2


class ConfigError(MemdError):
    exit_code = 5
