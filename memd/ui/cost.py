"""Model usage over a window of days, priced: the figures of `memd cost` and the page's cost chart.

Both ask `report`, which asks `memd.llm.usage.usage_by_day` at the table of `memd.llm.prices`, so
the terminal, the page and `memd status` agree to the token. Pure given the home and `today`.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from memd import settings as st
from memd import state
from memd.llm.prices import load_prices
from memd.llm.usage import DayUsage, JobUsage, usage_by_day
from memd.tree import Home


def money(cost: float | None) -> str:
    """Dollars as a person reads them; an unpriced figure is "unknown", never $0."""
    if cost is None:
        return "unknown"
    return f"${cost:.4f}" if cost < 1 else f"${cost:,.2f}"


def report(home: Home, today: date, days: int) -> dict[str, Any]:
    """`{"days", "from", "to", "prices", "budget", "total", "by_job", "by_day"}` (README, `memd cost --json`)."""
    s = st.load(home.settings_file)
    prices, problem = load_prices(home.memd_dir)
    by_day: list[DayUsage] = []
    jobs: dict[str, JobUsage] = {}
    if home.state_db.exists():
        conn = state.connect(home.state_db, readonly=True)
        try:
            by_day = usage_by_day(conn, today, days, prices)
        finally:
            conn.close()
    total = JobUsage()
    for d in by_day:
        for name, u in d.jobs.items():
            for acc in (total, jobs.setdefault(name, JobUsage())):
                acc.add(u.calls, u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens, u.cost_usd)
    return {"days": days, "from": (today - timedelta(days=max(1, days) - 1)).isoformat(), "to": today.isoformat(),
            "prices": {"as_of": prices.as_of, "source": prices.source, "problem": problem},
            "budget": s.memd.daily_token_budget, "total": total.as_json(),
            "by_job": {k: v.as_json() for k, v in sorted(jobs.items())},
            "by_day": [d.as_json() for d in by_day]}  # fmt: skip


def render(r: dict[str, Any]) -> list[str]:
    """The terminal form: the days with calls, then each job, then the total."""

    def row(label: str, u: dict[str, Any]) -> str:
        return (f"{label:<12} {u['calls']:>6} {u['input_tokens']:>11,} {u['output_tokens']:>10,} "
                f"{u['cache_read_tokens']:>10,} {money(u['cost_usd']):>10}")  # fmt: skip

    def head(first: str) -> str:
        return f"{first:<12} {'CALLS':>6} {'IN':>11} {'OUT':>10} {'CACHE READ':>10} {'COST':>10}"

    p = r["prices"]
    out = [f"model usage {r['from']} .. {r['to']} (UTC days), prices as of {p['as_of']} ({p['source']}), "
           f"daily budget {r['budget']:,} tokens"]  # fmt: skip
    if p["problem"]:
        out.append(f"warning: {p['problem']}")
    used = [d for d in r["by_day"] if d["calls"]]
    if not used:
        return [*out, f"no model calls in the last {r['days']} day(s)"]
    out += ["", head("DAY"), *(row(d["day"], d) for d in used)]
    if len(used) < len(r["by_day"]):
        out.append(f"({len(r['by_day']) - len(used)} day(s) without calls)")
    out += ["", head("JOB"), *(row(name, u) for name, u in r["by_job"].items()), row("total", r["total"])]
    return out
