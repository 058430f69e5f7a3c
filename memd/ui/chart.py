"""The cost page's chart: tokens per day, stacked by job, as an inline SVG drawn on the server.

No script and no network: the page works offline and under a strict content policy. Each bar
carries `data-day` and `data-tokens` (what the browser test reads) and a `<title>` (the tooltip a
person reads). Pure: days in, markup out.
"""

from __future__ import annotations

from html import escape
from typing import Any

WIDTH, HEIGHT = 900, 260
LEFT, BOTTOM, TOP = 64, 40, 16
# One colour per job, in a fixed order; a job the table does not know takes the last.
COLOURS = {"extract": "#3b82f6", "summary": "#10b981", "dream": "#a855f7", "remember": "#f59e0b",
           "index": "#64748b", "backfill": "#ef4444"}  # fmt: skip
OTHER = "#94a3b8"


def _nice(top: int) -> int:
    """The axis' top: 1, 2 or 5 times a power of ten, at or above `top`."""
    step = 1
    while True:
        for m in (1, 2, 5):
            if step * m >= top:
                return step * m
        step *= 10


def colour(job: str) -> str:
    return COLOURS.get(job, OTHER)


def svg(days: list[dict[str, Any]], budget: int) -> str:
    """Bars of tokens (input + output) per UTC day, oldest left; a dashed line at the daily budget
    when it fits within twice the highest day."""
    peak = max((int(d["tokens"]) for d in days), default=0)
    show_budget = 0 < budget <= 2 * max(peak, 1)
    top = _nice(max(peak, budget if show_budget else 0, 1))
    plot_h, plot_w = HEIGHT - TOP - BOTTOM, WIDTH - LEFT - 8
    slot = plot_w / max(1, len(days))
    bar = max(2.0, slot * 0.7)
    out = [f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
           f'aria-label="tokens per day, last {len(days)} days" xmlns="http://www.w3.org/2000/svg">']  # fmt: skip
    for i in range(5):
        v = top * i / 4
        y = TOP + plot_h - plot_h * i / 4
        out.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - 8}" y1="{y:.1f}" y2="{y:.1f}"/>'
                   f'<text class="axis" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{_short(v)}</text>')  # fmt: skip
    for i, d in enumerate(days):
        x = LEFT + i * slot + (slot - bar) / 2
        y = TOP + plot_h
        total = int(d["tokens"])
        out.append(f'<g class="day" data-day="{escape(d["day"])}" data-tokens="{total}">'
                   f'<title>{escape(d["day"])}: {total:,} tokens, {int(d["calls"])} calls</title>')  # fmt: skip
        for job, u in sorted(d["jobs"].items()):
            h = plot_h * int(u["tokens"]) / top
            y -= h
            out.append(f'<rect class="bar" data-job="{escape(job)}" x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" '
                       f'height="{h:.1f}" fill="{colour(job)}"/>')  # fmt: skip
        out.append("</g>")
        if i % 5 == 0 or i == len(days) - 1:
            out.append(f'<text class="axis" x="{x + bar / 2:.1f}" y="{HEIGHT - BOTTOM + 16}" '
                       f'text-anchor="middle">{escape(d["day"][5:])}</text>')  # fmt: skip
    if show_budget:
        y = TOP + plot_h - plot_h * budget / top
        out.append(f'<line class="budget" x1="{LEFT}" x2="{WIDTH - 8}" y1="{y:.1f}" y2="{y:.1f}"/>'
                   f'<text class="axis" x="{WIDTH - 10}" y="{y - 4:.1f}" text-anchor="end">daily budget</text>')  # fmt: skip
    out.append("</svg>")
    return "".join(out)


def _short(v: float) -> str:
    if v >= 1_000_000:
        return f"{v / 1_000_000:g}M"
    if v >= 1000:
        return f"{v / 1000:g}k"
    return f"{v:g}"
