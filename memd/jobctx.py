"""What a job gets and gives back: its target, its context, its result — and the job contract.

A job module in `jobs/` knows *what* to do; `memd.runner` decides *under which
lock*, records the run and turns exceptions into outcomes. The contract of a
job module is `Job` below (a `typing.Protocol` that mypy checks every module in
`memd.registry` against). `due` gathers facts with I/O and decides with pure
functions of those facts, the settings and `ctx.now()`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from memd.settings import Settings
from memd.tree import Home, Place

TargetKind = Literal["session", "project", "global"]
Outcome = Literal["ok", "skipped", "deferred", "failed"]


Target = Place  # transitional name; Place (memd.tree) is the one value for targets, locks and history


class Job(Protocol):
    """The contract of a job module (`jobs/<name>`): what it is, what it locks, what is due, the run."""

    NAME: str  # "extract", "summary", "dream", "index"
    TRIGGER: str  # one line for `memd jobs`
    NEEDS_MODEL: bool  # refused while the settings fail closed (memd.runner.refusal)
    TARGET_KINDS: tuple[str, ...]  # which Place kinds it takes ("session", "project", "global")

    def scopes(self, target: Place) -> list[Place]:
        """The locks held for the whole run (a job may take more itself, e.g. only to apply)."""
        ...

    def targets(self, ctx: JobContext) -> list[Place]:
        """Every target (`run-now --force --all`)."""
        ...

    def due(self, ctx: JobContext, only: Place | None = None) -> list[Place]:
        """The targets due now by the thresholds; `only` narrows to one."""
        ...

    def run(self, ctx: JobContext, target: Place, force: bool) -> RunResult:
        """The work; `force` skips thresholds, never a switch that says no."""
        ...


@dataclass
class RunResult:
    """How a run ended. `deferred` means: not now, try later (lock, key, budget)."""

    outcome: Outcome
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)


class Deferred(Exception):
    """Raised by a job (or the model layer) when it must wait: it is retried later."""


@dataclass
class JobContext:
    """Everything a run may use. One per run, so the sqlite connection is never shared across threads."""

    home: Home
    settings: Settings
    conn: sqlite3.Connection
    now: Callable[[], datetime]
    log: Any
    should_stop: Callable[[], bool] = lambda: False
    llm_factory: Callable[[JobContext], Any] | None = None
    usage: dict[str, int] = field(default_factory=lambda: {"calls": 0, "input_tokens": 0, "output_tokens": 0})
    _llm: Any = None

    @property
    def llm(self) -> Any:
        """The model layer, built on first use so jobs without model calls never import the SDK."""
        if self._llm is None:
            if self.llm_factory is None:
                from memd.context import make_llm  # the default: the model layer the settings describe

                self.llm_factory = make_llm
            self._llm = self.llm_factory(self)
        return self._llm


def get_cursor(conn: sqlite3.Connection, job: str, target: str) -> dict[str, Any] | None:
    import orjson

    row = conn.execute("SELECT value FROM cursors WHERE job=? AND target=?", (job, target)).fetchone()
    return None if row is None else orjson.loads(row[0])


def set_cursor(conn: sqlite3.Connection, job: str, target: str, value: dict[str, Any], now_iso: str) -> None:
    """Advance a cursor. Call only once the run's outputs are durable (the cursor rule)."""
    import orjson

    conn.execute(
        "INSERT INTO cursors(job, target, value, updated_at) VALUES (?,?,?,?) "
        "ON CONFLICT(job, target) DO UPDATE SET value=excluded.value, updated_at=excluded.updated_at",
        (job, target, orjson.dumps(value).decode(), now_iso),
    )
