"""The page in a real browser: Debian's headless Chromium driven by Playwright's Python package.

On a home built by the test (tests/ui/world.py) every page renders with no console error, the cost
chart has a bar for exactly the days with usage, a proposal is accepted and its run undone from the
page, and the daemon page updates without a reload when a run is recorded. A screenshot of each
page is kept in tests/out/ui/ (git ignores tests/out/) for a person to look at.

Skipped, with the reason, only when /usr/bin/chromium is absent. Never `playwright install`: the
browser is the system's.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import sync_playwright

from memd.tree import Home
from memd.write import proposals
from tests.procs import run_memd
from tests.ui.world import KEY, build, served, today

CHROMIUM = Path(os.environ.get("MEMD_TEST_CHROMIUM", "/usr/bin/chromium"))
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]  # fmt: skip
SHOTS = Path(__file__).resolve().parents[1] / "out" / "ui"

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ui-browser")]


@pytest.fixture
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        reason = f"{CHROMIUM} is absent: the page's browser test needs Debian's chromium (apt-get install chromium)"
        print(reason)
        pytest.skip(reason)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield b
        finally:
            b.close()


def test_every_page_in_chromium(tmp_path: Path, browser: Any) -> None:
    home = tmp_path / "home"
    info = build(home, today())
    SHOTS.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    with served(home) as srv:
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        ctx.set_default_timeout(120_000)  # auto-waits: a loaded CI machine renders slowly; passing costs nothing
        page = ctx.new_page()
        page.on("console", lambda m: problems.append(f"console {m.type} at {page.url}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
        page.on("response", lambda r: problems.append(f"{r.status} {r.url}") if r.status >= 400 else None)

        def shot(name: str) -> None:
            page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)

        # the printed address: the token becomes a cookie, the address loses it
        page.goto(srv.url)
        assert page.url == f"{srv.base}/"
        scopes = page.locator("h2.scope").all_inner_texts()
        assert any(s.startswith("Global drawer") for s in scopes) and any(KEY in s for s in scopes), scopes
        assert page.get_by_text("British English").count() >= 1
        shot("home")

        page.fill("input[name=q]", "linter")
        page.click("text=Search")
        # A click that navigates returns once the new page commits, not once it is parsed: wait for it
        # before reading (all_inner_texts and count do not wait).
        page.wait_for_load_state()
        assert page.locator("table tr td a").all_inner_texts() == ["run-linter-before-committing"]

        # one memory: text, why (the user's own line, its session) and its history with a diff
        page.click("text=run-linter-before-committing")
        page.wait_for_load_state()
        assert "Please always run the linter" in page.locator("pre.line").first.inner_text()
        assert "session s-first" in page.inner_text("main")
        assert page.locator(".run").count() == 1 and page.locator("pre.diff .add").count() >= 3
        shot("memory")

        # review: accept from the page
        page.goto(f"{srv.base}/review")
        assert page.locator(".proposal").count() == 1 and page.locator(".proposal pre.diff .add").count() >= 3
        shot("review")
        page.click(".proposal button:has-text('Accept')")
        page.wait_for_load_state()
        assert "accepted proposal" in page.inner_text(".flash")
        assert proposals.list_proposals(Home(home)) == []
        accepted = home / "projects" / KEY / "memory"
        cents = [p for p in accepted.iterdir() if "cents" in p.name]
        assert len(cents) == 1, list(accepted.iterdir())

        # ... and undo it from the memory's page
        page.goto(f"{srv.base}/")
        page.click(f"text={cents[0].stem}")
        page.wait_for_load_state()
        page.click(".run button:has-text('Undo this run')")
        page.wait_for_load_state()
        assert "restored as before" in page.inner_text(".flash")
        assert not cents[0].exists(), "the undo took the accepted memory back"
        assert "not in the project" in page.inner_text("main")

        # the daemon: timeline, sessions with title; it updates without a reload
        page.goto(f"{srv.base}/daemon")
        assert page.locator("table.timeline tr[data-run]").count() >= 2
        assert "Cart endpoint errors and the linter rule" in page.inner_text("table.sessions")
        shot("daemon")
        page.evaluate("window.__sameDocument = true")
        runs = page.locator("table.timeline tr[data-run]").count()
        done = run_memd(home, "run-now", "dream", "--global", "--force", process=True)  # memd does something
        assert done.returncode == 0, done.stderr
        rows = page.locator("table.timeline tr[data-run]")
        for _ in range(1200):  # up to 120 s (the page polls every 1.5 s; no script eval: the page's policy forbids it)
            if rows.count() > runs:
                break
            page.wait_for_timeout(100)
        assert rows.count() > runs, "the page did not update"
        assert "dream" in page.locator("table.timeline tr[data-run]").first.inner_text()
        assert page.evaluate("window.__sameDocument") is True, "updated in place, not reloaded"

        # cost: a bar for exactly the days with usage
        page.goto(f"{srv.base}/cost")
        bars = page.eval_on_selector_all("svg.chart g.day", "gs => gs.map(g => [g.dataset.day, +g.dataset.tokens])")
        assert len(bars) == 30
        assert sorted(d for d, t in bars if t > 0) == info["usage_days"]
        assert page.locator("svg.chart rect.bar").count() >= len(info["usage_days"])
        shot("cost")

        page.goto(f"{srv.base}/dreams")
        assert "Sync" in page.inner_text("main") and "Warnings" in page.inner_text("main")
        dream_card = page.locator(".dream", has_text="merged tabs")
        assert dream_card.count() == 1 and "project -work-tools" in dream_card.inner_text()
        shot("dreams")
        ctx.close()
    assert problems == [], problems
    assert sorted(p.name for p in SHOTS.glob("*.png")) >= ["cost.png", "daemon.png", "dreams.png", "home.png",
                                                          "memory.png", "review.png"]  # fmt: skip
