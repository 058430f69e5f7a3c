"""Review mode: nothing unapproved reaches a memory directory; an accepted proposal is exactly what was
proposed, through the write path and the history; a stale proposal is re-checked, not applied."""

from __future__ import annotations

import json
import json as _json
import sqlite3
from pathlib import Path

import pytest

from jobs import dream, extract
from memd.job.runner import run_job
from memd.memory.file import render_memory
from memd.memory.operations import validate_operations
from memd.tree import Place
from memd.write import apply as memwrite
from memd.write import proposals, review
from tests.jobkit import context, ingest, make_settings, write_session
from tests.jobs.dream.helpers import TARGET as DREAM_TARGET
from tests.jobs.dream.helpers import make_ctx, mk_settings, offline_scope
from tests.write.kit import (
    KEY,
    SID,
    cli,
    cli_json,
    editor,
    memory_dir,
    memory_files,
    settings,
    write_memory,
)

TARGET = Place("session", KEY, SID)
DURABLE = [("user", "Please always run the linter before committing; broken CI costs us hours."),
           ("assistant", "Understood."),
           ("user", "We decided that an empty cart is a 422 with a JSON error body."),
           ("assistant", "Noted.")]  # fmt: skip


def _ops(*raw: dict) -> list:
    accepted, rejected = validate_operations({"operations": list(raw)})
    assert not rejected, rejected
    return accepted


def _search_rows(home: Path) -> list[tuple]:
    db = home / "memd" / "search.sqlite"
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT file, name FROM memories").fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


def test_extraction_in_review_mode_writes_nothing_until_accepted_then_exactly_the_proposal(tmp_path: Path) -> None:
    home = tmp_path / "h"
    settings(home, memory={"review": True})
    write_session(home / "projects" / KEY / f"{SID}.jsonl", DURABLE)
    ingest(home)
    ctx = context(home, make_settings(memory={"review": True}))
    r = run_job(ctx, extract, TARGET)
    assert r.outcome == "ok" and r.details["applied"].get("proposed", 0) >= 2, r
    assert r.details["applied"]["added"] == 0
    assert memory_files(home) == {}, "nothing unapproved reaches a memory directory, MEMORY.md or the drawer"
    assert _search_rows(home) == []

    (row,) = cli_json(home, "review")
    pid = row["id"]
    assert row["job"] == "extract" and row["session"] == SID
    assert {c["action"] for c in row["changes"]} == {"add"}
    proposed = {c["file"]: (proposals.load(ctx.home, pid).proposed_text(n), c)
                for n, c in enumerate(row["changes"])}  # fmt: skip
    shown = cli(home, "review", "show", pid)
    assert shown.returncode == 0 and "run the linter" in shown.stdout.lower() and "+name:" in shown.stdout
    assert "/dev/null" in shown.stdout  # new files: a diff against nothing
    status = cli_json(home, "status")
    assert status["proposals"]["waiting"] == 1 and status["proposals"]["oldest_age_seconds"] >= 0
    assert "1 waiting for review" in cli(home, "status").stdout
    # A re-run over the same span (a crash before the cursor moved) does not duplicate the proposal.
    again = memwrite.apply(ctx, KEY, [], provider="offline", session_id=SID)
    assert again.proposal is None and len(proposals.list_proposals(ctx.home)) == 1

    acc = cli(home, "review", "accept", pid)
    assert acc.returncode == 0, acc.stderr
    for file, (text, c) in proposed.items():
        d = memory_dir(home, None if c["scope"] == "global" else c["key"])
        assert (d / file).read_text(encoding="utf-8") == text, "accepted = exactly the proposal"
        assert c["name"] in (d / "MEMORY.md").read_text()
    assert cli_json(home, "review") == []
    assert len(_search_rows(home)) == len(proposed)
    runs = [r for r in cli_json(home, "history") if r["kind"] == "write"]
    assert {r["scope"] for r in runs} == {f"project:{KEY}"} and len({r["run"] for r in runs}) == 1
    # The accepted proposal is one history run: undo takes it back.
    und = cli(home, "undo", runs[-1]["run"])
    assert und.returncode == 0, und.stderr
    assert [f for f in memory_files(home) if not f.endswith("MEMORY.md")] == []


def test_a_stale_proposal_is_refused_and_kept_then_rebased_and_accepted(tmp_path: Path) -> None:
    home = tmp_path / "h"
    settings(home, memory={"review": True})
    target = write_memory(home, "uses-uv", "The project uses uv for packages.")
    ctx = context(home, make_settings(memory={"review": True}))
    applied = memwrite.apply(ctx, KEY, _ops({"op": "update", "scope": "project", "name": "uses-uv", "type": "project",
                                             "description": "the project uses poetry, uv is gone",
                                             "body": "We switched to poetry; uv is gone."}),
                             provider="anthropic", session_id=SID)  # fmt: skip
    pid = applied.proposal
    assert pid and applied.proposed == ["project:uses-uv"]
    assert "uv for packages" in target.read_text(), "not written before acceptance"
    hand = target.read_text() + "\nEdited by hand meanwhile.\n"
    target.write_text(hand)

    r = cli(home, "review", "accept", pid)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "uses-uv.md was changed since" in r.stderr and "kept" in r.stderr
    assert target.read_text() == hand, "never blindly applied"
    (row,) = cli_json(home, "review")
    assert row["id"] == pid and "was changed" in row["check"]["reason"]

    rb = cli(home, "review", "rebase", pid)
    assert rb.returncode == 0 and "-Edited by hand meanwhile." in rb.stdout
    proposed = proposals.load(ctx.home, pid).proposed_text(0)
    assert cli(home, "review", "accept", pid).returncode == 0
    assert target.read_text() == proposed


def test_edit_validates_on_save_reject_drops(tmp_path: Path) -> None:
    home = tmp_path / "h"
    settings(home, memory={"review": True})
    ctx = context(home, make_settings(memory={"review": True}))
    applied = memwrite.apply(ctx, KEY, _ops({"op": "add", "scope": "project", "name": "deploy-fridays", "type": "project",
                                             "description": "we deploy on Fridays", "body": "Deploys go out on Fridays."}),
                             provider="anthropic", session_id=SID)  # fmt: skip
    pid = applied.proposal
    assert pid
    good = editor(tmp_path, "good", "t = t.replace('Fridays.', 'Fridays, never on a holiday.')")
    r = cli(home, "review", "edit", pid, editor=good)
    assert r.returncode == 0, r.stderr
    assert "never on a holiday" in cli(home, "review", "show", pid).stdout
    before = proposals.load(ctx.home, pid).proposed_text(0)

    bad = editor(tmp_path, "bad", "t = t.replace('  type: project\\n', '')")
    r = cli(home, "review", "edit", pid, editor=bad)
    assert r.returncode == 2 and "missing type" in r.stderr and "unchanged" in r.stderr, r.stderr
    assert proposals.load(ctx.home, pid).proposed_text(0) == before
    secret = editor(tmp_path, "secret", "t = t.replace('name: deploy-fridays', 'name: deploy ghp_' + 'Ab1x' * 9)")
    r = cli(home, "review", "edit", pid, editor=secret)
    assert r.returncode == 2 and "secret" in r.stderr
    assert proposals.load(ctx.home, pid).proposed_text(0) == before

    assert cli(home, "review", "reject", pid).returncode == 0
    assert cli_json(home, "review") == [] and memory_files(home) == {}
    assert cli(home, "review", "show", pid).returncode == 2


def test_dream_directory_proposal_accept_all_and_undo(tmp_path: Path) -> None:
    home = tmp_path / "h"
    settings(home, memory={"review": True})
    a = write_memory(home, "tabs", "Use tabs.", key=None, typ="feedback")
    b = write_memory(home, "tabs-2", "Use tabs, not spaces.", key=None, typ="feedback")
    before = {p.name: p.read_bytes() for p in (a, b)}
    ctx = context(home, make_settings(memory={"review": True}))

    merged = render_memory("tabs", "the user indents with tabs", "feedback", "Use tabs, not spaces.",
                           {"source": "memd", "merged_from": ["tabs", "tabs-2"]})  # fmt: skip
    p = proposals.propose_directory_change(ctx, Place.global_(), {"tabs.md": merged, "tabs-2.md": None,
                                                                  "gone.md": None}, reason="merged near-duplicates",
                                           details={"merged": 1})  # fmt: skip
    assert p is not None and [c["action"] for c in p.changes] == ["delete", "update"]
    assert proposals.propose_directory_change(ctx, Place.global_(), {"tabs.md": a.read_text()}, reason="x") is None
    other = memwrite.apply(ctx, KEY, _ops({"op": "add", "scope": "project", "name": "ci-slow", "type": "project",
                                           "description": "CI is slow", "body": "CI takes an hour."}),
                           provider="anthropic", session_id=SID)  # fmt: skip
    assert other.proposal and memory_files(home).keys() == {"memory/tabs.md", "memory/tabs-2.md"}

    out = cli_json(home, "review", "accept", "--all")
    assert [r["id"] for r in out] == [p.id, other.proposal], "oldest first"
    assert [r["accepted"] for r in out] == [True, True], out
    assert a.read_text() == merged and not b.exists()
    assert (memory_dir(home) / "ci-slow.md").exists()
    run = out[0]["runs"][0]
    u = cli(home, "undo", run)
    assert u.returncode == 0, u.stderr
    assert {p.name: p.read_bytes() for p in (a, b)} == before, "undone byte for byte"


@pytest.mark.slow
def test_read_only_refuses_writes_and_accepts_but_indexes_go_on(tmp_path: Path) -> None:
    home = tmp_path / "h"
    settings(home)
    write_session(home / "projects" / KEY / f"{SID}.jsonl", DURABLE)
    ingest(home)
    # The settings switch: extraction's outcome says why nothing was written.
    ctx = context(home, make_settings(memory={"readOnly": True}))
    r = run_job(ctx, extract, TARGET)
    assert r.outcome == "ok" and r.details["applied"]["read_only"] >= 2 and r.details["applied"]["added"] == 0, r
    assert memory_files(home) == {}

    # memd readonly: one project; the drawer stays writable.
    assert cli(home, "readonly", "on", "--project", KEY).returncode == 0
    ro = cli_json(home, "readonly")
    assert KEY in ro["projects"] and ro["global"] is None
    refused = cli(home, "remember", "We decided to ship on Fridays.", "--project", KEY)
    assert refused.returncode == 1 and "read-only" in refused.stderr, refused.stderr
    assert cli(home, "remember", "I prefer short answers.", "--global").returncode == 0
    hand = write_memory(home, "by-hand", "Written by the user while read-only.")
    ix = cli(home, "run-now", "index", "--project", KEY)
    assert ix.returncode == 0, ix.stderr
    assert "by-hand" in (memory_dir(home) / "MEMORY.md").read_text(), "indexes follow hand edits"
    forget = cli(home, "forget", "by-hand", "--project", KEY)
    assert forget.returncode == 1 and hand.exists()

    # A proposal made before the switch is refused on accept, and kept.
    assert cli(home, "readonly", "off", "--project", KEY).returncode == 0
    ctx2 = context(home, make_settings(memory={"review": True}))
    p = memwrite.apply(ctx2, KEY, _ops({"op": "add", "scope": "project", "name": "x-rule", "type": "project",
                                        "description": "x", "body": "x rule"}), provider="anthropic",
                       session_id=SID).proposal  # fmt: skip
    assert cli(home, "readonly", "on", "--session", SID).returncode == 0
    acc = cli(home, "review", "accept", p or "")
    assert acc.returncode == 1 and f"session {SID} is read-only" in acc.stderr
    assert [x["id"] for x in cli_json(home, "review")] == [p]
    assert cli(home, "readonly", "off", "--session", SID).returncode == 0
    assert cli(home, "review", "accept", p or "").returncode == 0
    assert json.loads(cli(home, "readonly", "--json").stdout) == {"settings": False, "global": None, "projects": {},
                                                                  "sessions": {}}  # fmt: skip


def test_dream_in_review_mode_proposes_and_writes_nothing(tmp_path: Path) -> None:
    """Dream's whole-directory change waits as one proposal; accepting it applies exactly it."""

    home = tmp_path / "h"
    d = offline_scope(home)
    before = {p.name: p.read_bytes() for p in d.glob("*.md")}
    ctx = make_ctx(home, mk_settings(review=True))
    r = run_job(ctx, dream, DREAM_TARGET, force=True)
    assert r.outcome == "ok" and "proposal" in r.reason, r
    assert {p.name: p.read_bytes() for p in d.glob("*.md")} == before

    [p] = proposals.list_proposals(ctx.home)
    assert p.info.get("job") == "dream"
    review.accept(ctx, p.id, lock_timeout=1)
    after = {f.name for f in d.glob("*.md")}
    assert after != set(before) and proposals.list_proposals(ctx.home) == []
    readonly_ctx = make_ctx(home, mk_settings(readOnly=True))
    r = run_job(readonly_ctx, dream, DREAM_TARGET, force=True)
    assert r.outcome == "skipped" and "read-only" in r.reason
    _json.dumps(r.details)
    assert hasattr(review, "accept")
