"""The price table and usage by day: one source for every screen that shows money."""

from __future__ import annotations

import json
import sqlite3
from datetime import date
from pathlib import Path

from memd.llm.prices import AS_OF, PriceTable, load_prices
from memd.llm.usage import usage_by_day


def test_family_prefix_and_unknown_model() -> None:
    t = PriceTable()
    assert t.price("claude-haiku-4-5-20251001") == t.price("claude-haiku-4-5")
    assert t.cost("claude-haiku-4-5", 1_000_000, 1_000_000) == 6.0
    assert t.cost("claude-sonnet-4-6", 1_000_000, 0, cache_read=1_000_000) == 3.0 + 0.3
    assert t.cost("gpt-9", 10, 10) is None  # unknown is unknown, never a silent zero


def test_override_file_and_bad_files(tmp_path: Path) -> None:
    assert load_prices(tmp_path) == (PriceTable(), None)
    (tmp_path / "prices.json").write_text(json.dumps({"asOf": "2026-12-01", "models": {"my-model": {"input": 2, "output": 4}}}))
    t, problem = load_prices(tmp_path)
    assert problem is None and t.as_of == "2026-12-01" and t.cost("my-model-x", 1_000_000, 0) == 2.0
    assert t.price("claude-haiku-4-5") is not None  # the built-in rows stay
    for bad, field in (({"models": {"m": {"input": -1, "output": 1}}}, "models.m.input"),
                       ({"models": {"m": {"output": 1}}}, "models.m.input"),
                       ({"models": []}, "models"), ({"asOf": 5}, "asOf")):  # fmt: skip
        (tmp_path / "prices.json").write_text(json.dumps(bad))
        t, problem = load_prices(tmp_path)
        assert t.as_of == AS_OF and problem is not None and field in problem and "prices.json" in problem
    (tmp_path / "prices.json").write_text('{"models": {"m": {"input": Infinity, "output": 1}}}')
    t, problem = load_prices(tmp_path)
    assert problem is not None and t.source == "built-in"


def test_usage_by_day_counts_each_call_once() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE model_calls (day TEXT, job TEXT, model TEXT, input_tokens INT, output_tokens INT, "
                 "cache_read_tokens INT, cache_write_tokens INT)")
    rows = [("2026-11-30", "extract", "claude-haiku-4-5", 1000, 100, 0, 0),
            ("2026-11-30", "extract", "claude-sonnet-4-6", 2000, 200, 0, 0),
            ("2026-12-02", "dream", "claude-sonnet-4-6", 10, 1, 0, 0),
            ("2026-12-02", "dream", "mystery", 10, 1, 0, 0),
            ("2026-11-01", "extract", "claude-haiku-4-5", 9, 9, 0, 0)]  # out of the window
    conn.executemany("INSERT INTO model_calls VALUES (?,?,?,?,?,?,?)", rows)
    days = usage_by_day(conn, date(2026, 12, 2), 3, PriceTable())
    assert [d.day for d in days] == ["2026-11-30", "2026-12-01", "2026-12-02"]
    d0 = days[0]
    assert d0.total.calls == 2 and d0.total.tokens == 3300 and d0.jobs["extract"].calls == 2
    assert abs((d0.total.cost_usd or 0) - (1000 * 1 + 100 * 5 + 2000 * 3 + 200 * 15) / 1e6) < 1e-12
    assert days[1].total.calls == 0 and days[1].total.cost_usd == 0.0
    assert days[2].total.cost_usd is None  # one unpriced model makes the day's money unknown
    assert days[2].as_json()["jobs"]["dream"]["calls"] == 2  # type: ignore[index]
