"""memd's expected failures: one class per row of the README's exit-code table.

The CLI prints a `MemdError` as one line on stderr (`memd: <message>`) and exits
with its `exit_code`; anything else is a bug and keeps its traceback. Library
errors derive from the row they exit with (`locks.LockBusy` is a `BusyError`,
`llm.ModelError` a `ModelAPIError`, ...). Each docstring opens with the row's
meaning: tests/cli/test_exit_codes.py holds these classes equal to the README's
table ("## Exit codes") and to `memd --help`.
"""

from __future__ import annotations


class MemdError(Exception):
    """error: an expected failure the user can act on."""

    exit_code = 1


class UsageError(MemdError):
    """usage: bad arguments, an unknown session, job or run."""

    exit_code = 2


class AlreadyRunningError(MemdError):
    """already running: a daemon already runs on this home."""

    exit_code = 3


class ModelAPIError(MemdError):
    """model API: no model can be called, the budget is spent, or its answer is unusable."""

    exit_code = 4


class ConfigError(MemdError):
    """configuration: the settings have problems (`memd config --check`)."""

    exit_code = 5


class BusyError(MemdError):
    """busy: a lock (or the state database) was held by another memd process; try again."""

    exit_code = 75
