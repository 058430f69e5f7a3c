"""`memd cost`: model tokens and their price per day and per job (memd/ui/cost.py asks memd/llm/usage.py).

`--json` output is a stable interface (README): `{"days", "from", "to", "prices": {"as_of", "source",
"problem"}, "budget", "total", "by_job": {job: totals}, "by_day": [{"day", ...totals, "jobs": {job: totals}}]}`,
totals being `{"calls", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
"tokens", "cost_usd"}`; `cost_usd` is null when a model had no price (never a silent 0).
"""

from __future__ import annotations

import click

from memd.cli import command, get_home, json_out


@command("cost")
@click.option("--days", default=30, show_default=True, type=click.IntRange(1, 3660),
              help="How many UTC days back, today included.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def cost_cmd(ctx: click.Context, days: int, as_json: bool) -> None:
    """Model tokens and their price per day and per job, at the dated price table
    (`<home>/memd/prices.json` overrides it; `memd status` shows the last 7 days)."""
    from memd.clock import system_clock
    from memd.ui.cost import render, report

    r = report(get_home(ctx), system_clock().date(), days)
    if as_json:
        json_out(r)
    else:
        click.echo("\n".join(render(r)))
