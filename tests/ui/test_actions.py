"""The page's changes go through memd's write path: validation refuses a bad file and keeps what was,
a memory changed meanwhile is not overwritten, every change is a history run that undo takes back.
Driven as the page drives them (cookie, Origin, a page's write token) against a real `memd ui`."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from memd.history.runs import list_runs
from memd.tree import Home, Place
from memd.write import proposals
from tests.ui.test_guard import csrf_of, req
from tests.ui.world import KEY, Page, build, served, today

pytestmark = pytest.mark.xdist_group("ui-actions")
MEMORY = "run-linter-before-committing.md"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Path, Page, str]]:
    home = tmp_path / "home"
    info = build(home, today())
    with served(home) as page:
        yield home, page, str(info["proposal"])


def post(page: Page, action: str, fields: dict[str, str], back: str = "/review") -> tuple[int, dict[str, str], str]:
    return req(page, "POST", f"/action/{action}", cookie=page.token, origin=f"http://127.0.0.1:{page.port}",
               body={"csrf": csrf_of(page, back), "back": back, **fields})  # fmt: skip


def test_a_proposal_edited_on_the_page_is_validated_then_kept(world: tuple[Path, Page, str]) -> None:
    home, page, pid = world
    before = proposals.load(Home(home), pid).proposed_text(0) or ""
    code, _h, body = post(page, "edit-proposal", {"id": pid, "n": "0", "text": "no front matter at all"})
    assert code == 409 and "Not done" in body
    assert proposals.load(Home(home), pid).proposed_text(0) == before, "an invalid edit changes nothing"
    edited = before.replace("never floats", "never floats, and rounded half-even").replace("\n", "\r\n")
    code, h, _ = post(page, "edit-proposal", {"id": pid, "n": "0", "text": edited})
    assert code == 303 and "done=" in h["location"]
    p = proposals.load(Home(home), pid)
    assert p.proposed_text(0) == edited.replace("\r\n", "\n") and p.info.get("edited") is True
    assert "half-even" in req(page, "GET", "/review", cookie=page.token)[2]


def test_a_memory_edited_on_the_page_is_one_undoable_run_and_a_stale_page_does_not_overwrite(
        world: tuple[Path, Page, str]) -> None:  # fmt: skip
    home, page, _pid = world
    path = home / "projects" / KEY / "memory" / MEMORY
    original = path.read_bytes()
    back = f"/memory?scope=project%3A{KEY}&file={MEMORY}"
    shown = req(page, "GET", back, cookie=page.token)[2]
    base = re.search(r'name="base" value="([0-9a-f]{64})"', shown)
    assert base and base.group(1) == hashlib.sha256(original).hexdigest()
    new = original.decode().replace("Broken CI costs us hours.", "Broken CI costs us a day.")
    code, h, _ = post(page, "edit-memory", {"scope": f"project:{KEY}", "file": MEMORY, "base": base.group(1), "text": new}, back)
    assert code == 303 and "saved" in h["location"], h
    assert path.read_text() == new
    run = list_runs(Home(home), Place("project", KEY))[-1]
    assert run["job"] == "edit" and MEMORY in run["changes"]["updated"]
    # the page still showing the old text (its base) must not overwrite the new one
    code, _h, body = post(page, "edit-memory", {"scope": f"project:{KEY}", "file": MEMORY, "base": base.group(1),
                                                "text": original.decode() + "\nmore"}, back)  # fmt: skip
    assert code == 409 and "changed" in body and path.read_text() == new
    code, h, _ = post(page, "undo", {"scope": f"project:{KEY}", "run": run["run"]}, back)
    assert code == 303 and "restored" in h["location"]
    assert path.read_bytes() == original


def test_refusals_are_one_line_and_change_nothing(world: tuple[Path, Page, str]) -> None:
    _home, page, pid = world
    for action, fields in (("undo", {"scope": "global", "run": "20990101T000000Z-abcdef"}),
                           ("undo", {"scope": "global", "run": "../../etc"}),
                           ("undo", {"scope": "project:..", "run": "20990101T000000Z-abcdef"}),
                           ("accept", {"id": "nosuch"}), ("edit-proposal", {"id": pid, "n": "x", "text": ""}),
                           ("edit-memory", {"scope": "global", "file": "../settings.json", "base": "", "text": "x"})):  # fmt: skip
        code, _h, body = post(page, action, fields)
        assert code == 409 and "Not done" in body, (action, fields, body[-400:])
    assert post(page, "nosuch", {})[0] == 404
