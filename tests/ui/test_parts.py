"""The page's pure parts: the chart, the guard's decisions, the escaping; and `memd ui` on a taken port."""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path

from memd.ui import guard, pages
from memd.ui.chart import svg
from memd.ui.serve import graphical
from tests.conftest import memd_cmd
from tests.procs import memd_env


def _day(day: str, **jobs: int) -> dict[str, object]:
    return {"day": day, "tokens": sum(jobs.values()), "calls": len(jobs),
            "jobs": {j: {"tokens": t} for j, t in jobs.items()}}  # fmt: skip


def test_the_chart_has_a_bar_per_job_on_the_days_with_tokens_only() -> None:
    days = [_day("2026-11-28"), _day("2026-11-29", extract=900, dream=3000), _day("2026-11-30", summary=10)]
    out = svg(days, budget=2_000_000)
    assert re.findall(r'data-day="([^"]+)" data-tokens="(\d+)"', out) == [("2026-11-28", "0"), ("2026-11-29", "3900"),
                                                                        ("2026-11-30", "10")]  # fmt: skip
    assert re.findall(r'data-job="(\w+)"', out) == ["dream", "extract", "summary"]
    assert "daily budget" not in out, "a budget far above every day would flatten the bars: not drawn"
    assert "daily budget" in svg(days, budget=5000)
    assert "<rect" not in svg([_day("2026-11-28")], budget=0)


def test_the_chart_escapes_a_job_name() -> None:
    out = svg([_day("2026-11-28", **{"<script>x": 5})], budget=0)
    assert "<script>" not in out and "&lt;script&gt;" in out


def test_guard_decisions() -> None:
    assert guard.host_ok("127.0.0.1:8123", 8123) and guard.host_ok("LOCALHOST:8123", 8123)
    for bad in (None, "", "127.0.0.1", "127.0.0.1:8124", "evil.example:8123", "127.0.0.1:8123.evil.example"):
        assert not guard.host_ok(bad, 8123), bad
    assert guard.origin_ok("http://localhost:8123", 8123)
    for bad in (None, "null", "http://127.0.0.1:8124", "https://127.0.0.1:8123", "http://evil.example"):
        assert not guard.origin_ok(bad, 8123), bad
    assert guard.secret_ok("s3cret", "s3cret") and not guard.secret_ok("s3cre", "s3cret") and not guard.secret_ok(None, "x")
    tokens = guard.WriteTokens(kept=2)
    a, b, c = tokens.issue(), tokens.issue(), tokens.issue()
    assert not tokens.use(a), "the oldest is forgotten past the limit"
    assert tokens.use(b) and not tokens.use(b), "good once"
    assert tokens.use(c) and not tokens.use("") and not tokens.use(None)


def test_what_the_home_holds_is_data_never_markup() -> None:
    evil = '<img src=x onerror="alert(1)">'
    html = pages.home_page([("global", [{"name": evil, "file": "a.md", "type": "user", "description": evil,
                                         "age_seconds": 5, "stale": None}], [evil])], evil)  # fmt: skip
    assert "<img" not in html and html.count("&lt;img") >= 3
    assert "<img" not in pages.diff_html(f"+{evil}\n-{evil}")


def test_a_taken_port_is_a_usage_error(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "projects").mkdir(parents=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        r = subprocess.run([*memd_cmd(), "--home", str(home), "ui", "--no-open", "--port", str(port)],
                           capture_output=True, text=True, env=memd_env(), timeout=60, check=False)  # fmt: skip
    assert r.returncode == 2 and f"127.0.0.1:{port}" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_browser_is_opened_only_where_it_can_show_a_window() -> None:
    assert graphical({"DISPLAY": ":0"}, "linux") and graphical({"WAYLAND_DISPLAY": "w"}, "linux")
    assert graphical({}, "darwin") and not graphical({}, "linux") and not graphical({"DISPLAY": ""}, "linux")
