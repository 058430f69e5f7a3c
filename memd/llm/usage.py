"""Model usage over days, read from the `model_calls` ledger and priced by one table.

The readers of spending (`memd cost`, the 7-day line of `memd status`, `memd ui`'s chart, the
backlog estimate) all ask here, so their figures agree to the token. Pure given a connection and
a date: `today` is injected, never read from the clock here.

Invariant: every call row counts once, in the UTC day it was recorded in (`model_calls.day`), for
its job and model; failed calls count their tokens too (the API bills what it processed).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from datetime import date, timedelta

from memd.llm.prices import PriceTable

__all__ = ["DayUsage", "JobUsage", "usage_by_day"]


@dataclass
class JobUsage:
    """One job's calls and tokens on one day; `cost_usd` is None when a model had no price."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = 0.0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, calls: int, i: int, o: int, cr: int, cw: int, cost: float | None) -> None:
        self.calls += calls
        self.input_tokens += i
        self.output_tokens += o
        self.cache_read_tokens += cr
        self.cache_write_tokens += cw
        self.cost_usd = None if cost is None or self.cost_usd is None else self.cost_usd + cost

    def as_json(self) -> dict[str, object]:
        return {"calls": self.calls, "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cache_read_tokens": self.cache_read_tokens, "cache_write_tokens": self.cache_write_tokens,
                "tokens": self.tokens, "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 6)}  # fmt: skip


@dataclass
class DayUsage:
    """One UTC day: the total and each job's share (jobs absent that day are absent here)."""

    day: str
    total: JobUsage = field(default_factory=JobUsage)
    jobs: dict[str, JobUsage] = field(default_factory=dict)

    def as_json(self) -> dict[str, object]:
        return {"day": self.day, **self.total.as_json(), "jobs": {k: v.as_json() for k, v in sorted(self.jobs.items())}}


def usage_by_day(conn: sqlite3.Connection, today: date, days: int, prices: PriceTable) -> list[DayUsage]:
    """The last `days` UTC days ending with `today`, oldest first, every day present (zeros included)."""
    days = max(1, days)
    first = today - timedelta(days=days - 1)
    out = {(first + timedelta(days=i)).isoformat(): DayUsage((first + timedelta(days=i)).isoformat())
           for i in range(days)}  # fmt: skip
    rows = conn.execute(
        "SELECT day, job, model, COUNT(*), SUM(input_tokens), SUM(output_tokens), SUM(cache_read_tokens), "
        "SUM(cache_write_tokens) FROM model_calls WHERE day >= ? AND day <= ? GROUP BY day, job, model",
        (first.isoformat(), today.isoformat()),
    ).fetchall()
    for day, job, model, calls, i, o, cr, cw in rows:
        d = out.get(day)
        if d is None:
            continue
        cost = prices.cost(model, i or 0, o or 0, cr or 0, cw or 0)
        d.total.add(calls, i or 0, o or 0, cr or 0, cw or 0, cost)
        d.jobs.setdefault(job, JobUsage()).add(calls, i or 0, o or 0, cr or 0, cw or 0, cost)
    return list(out.values())
