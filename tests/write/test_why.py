"""`memd why` and `memd show`: a memory's sources read back from the transcripts (redacted), for an
extracted memory, a MewCode one, a merged one (its inputs from the dream's snapshot), and one written by hand."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from jobs import dream, extract
from memd.job.runner import run_job
from memd.memory.file import parse_memory, render_memory
from memd.memory.scan import scan_dir
from memd.tree import Place
from memd.write import proposals, review
from tests.jobkit import context, ingest, make_settings, write_session
from tests.write.kit import GHP, KEY, SID, cli, cli_json, memory_dir, settings, write_memory


def _set_sources(path: Path, sources: list[dict]) -> None:
    m = parse_memory(path, path.read_text())
    path.write_text(render_memory(m.name, m.description, m.type, m.body, {**m.metadata, "sources": sources}))


def test_why_on_an_extracted_memory_prints_the_users_redacted_lines(tmp_path: Path) -> None:
    home = tmp_path / "h"
    settings(home)
    said = f"Please always run the linter before committing; the CI token is {GHP}."
    write_session(home / "projects" / KEY / f"{SID}.jsonl", [("user", "hello there, what does this do?"),
                                                              ("assistant", "It parses."), ("user", said),
                                                              ("assistant", "Understood.")])  # fmt: skip
    ingest(home)
    ctx = context(home, make_settings())
    r = run_job(ctx, extract, Place("session", KEY, SID))
    assert r.outcome == "ok" and r.details["applied"]["added"] >= 1, r
    mems = scan_dir(memory_dir(home), "project", KEY).memories + scan_dir(memory_dir(home, None)).memories
    (m,) = [m for m in mems if "linter" in m.name]
    if not m.metadata.get("sources"):  # extraction not yet filling them: the shape it agreed to
        _set_sources(m.path, [{"session": SID, "uuids": ["u2"], "offsets": [], "ts": "2026-11-29T10:00:02Z"}])
    scope = ["--global"] if m.scope == "global" else ["--project", KEY]

    data = cli_json(home, "why", m.name, *scope)
    (src,) = data["sources"]
    assert src["session"] == SID and src["transcript"] == f"projects/{KEY}/{SID}.jsonl" and src["problem"] is None
    (line,) = src["lines"]
    assert "always run the linter before committing" in line["text"] and "[REDACTED:github]" in line["text"]
    assert line["ts"] == "2026-11-29T10:00:02Z" and line["uuid"] == "u2"
    text = cli(home, "why", m.name, *scope).stdout
    assert f"session {SID}" in text and "user: Please always run the linter" in text and GHP not in text
    show = cli(home, "show", m.name, *scope)
    assert show.returncode == 0 and f"source: session {SID}, 1 message(s)" in show.stdout and "age:" in show.stdout
    shown = cli_json(home, "show", m.name, *scope)
    assert shown["sources"][0]["session"] == SID and shown["age_seconds"] >= 0

    # The transcript moved away: said so, no traceback.
    (home / "projects" / KEY / f"{SID}.jsonl").rename(tmp_path / "away.jsonl")
    gone = cli_json(home, "why", m.name, *scope)
    assert "is gone" in gone["sources"][0]["problem"]


def test_why_reads_mewcode_records_by_offset(tmp_path: Path) -> None:
    home = tmp_path / "h"
    settings(home)
    recs = [{"type": "system_prompt", "content": "you are helpful", "timestamp": "2026-11-29T09:00:00Z"},
            {"type": "user", "content": "We deploy only on Fridays, never on a holiday.", "timestamp": "2026-11-29T09:01:00Z"},
            {"type": "assistant", "content": "Noted.", "timestamp": "2026-11-29T09:01:05Z"}]  # fmt: skip
    lines = [json.dumps(r) + "\n" for r in recs]
    t = home / "projects" / KEY / ".mewcode" / "sessions" / "mew-1.jsonl"
    t.parent.mkdir(parents=True)
    t.write_text("".join(lines))
    end_of_user = len((lines[0] + lines[1]).encode())
    write_memory(home, "deploy-fridays", "We deploy on Fridays.",
                 meta={"sources": [{"session": "mew-1", "uuids": [], "offsets": [end_of_user], "ts": "2026-11-29T09:01:00Z"}]})  # fmt: skip
    data = cli_json(home, "why", "deploy-fridays", "--project", KEY)
    (line,) = data["sources"][0]["lines"]
    assert line["text"] == "We deploy only on Fridays, never on a holiday." and line["offset"] == end_of_user


def test_why_on_a_merged_memory_shows_the_memories_it_was_made_of(tmp_path: Path) -> None:
    home = tmp_path / "h"
    settings(home)
    d = memory_dir(home)
    for sid, said in (("sa", "Use tabs, not spaces; the history uses tabs."),
                      ("sb", f"Tabs, never spaces! token {GHP}")):  # fmt: skip
        write_session(home / "projects" / KEY / f"{sid}.jsonl", [("user", said), ("assistant", "ok")])
    ingest(home)
    old = datetime.now(UTC) - timedelta(days=3)
    for name, sid, body in (("tabs", "sa", "Use tabs, not spaces. Why: history uses tabs."),
                            ("tabs-2", "sb", "Use tabs, not spaces! Why: history uses tabs")):  # fmt: skip
        p = write_memory(home, name, body, typ="feedback", description="the user indents with tabs here",
                         meta={"source": "memd", "updated": old.isoformat().replace("+00:00", "Z"),
                               "sources": [{"session": sid, "uuids": ["u0"], "offsets": [], "ts": "2026-11-29T10:00:00Z"}]})  # fmt: skip
        os.utime(p, (old.timestamp(), old.timestamp()))
    ctx = context(home, make_settings(), now=datetime.now(UTC))
    r = run_job(ctx, dream, Place("project", KEY), force=True)
    assert r.outcome == "ok", r
    (m,) = [m for m in scan_dir(d).memories if m.metadata.get("merged_from")]
    data = cli_json(home, "why", m.name, "--project", KEY)
    inputs = {e["name"]: e for e in data["merged_from"]}
    assert set(inputs) == {"tabs", "tabs-2"}
    lines = {e["name"]: e["memory"]["sources"][0]["lines"][0]["text"] for e in inputs.values()}
    assert lines["tabs"] == "Use tabs, not spaces; the history uses tabs."
    assert lines["tabs-2"] == "Tabs, never spaces! token [REDACTED:github]"
    text = cli(home, "why", m.name, "--project", KEY).stdout
    assert "merged from 2 memories" in text and "session sa" in text and "session sb" in text and GHP not in text


def test_why_and_show_on_a_memory_written_by_hand(tmp_path: Path) -> None:
    home = tmp_path / "h"
    settings(home)
    write_memory(home, "mine", "Mine.", key=None, typ="user")
    assert "no recorded sources" in cli(home, "why", "mine", "--global").stdout
    assert "not recorded" in cli(home, "show", "mine", "--project", KEY).stdout
    assert cli(home, "why", "nope", "--global").returncode == 2


def test_why_on_a_merge_accepted_in_review_mode_reads_the_inputs_from_the_write_run(tmp_path: Path) -> None:
    home = tmp_path / "h"
    settings(home, memory={"review": True})
    for sid, said in (("sa", "Use tabs, not spaces."), ("sb", "Tabs please, never spaces.")):
        write_session(home / "projects" / KEY / f"{sid}.jsonl", [("user", said), ("assistant", "ok")])
    for name, sid in (("tabs", "sa"), ("tabs-2", "sb")):
        write_memory(home, name, f"{name} body", typ="feedback",
                     meta={"sources": [{"session": sid, "uuids": ["u0"], "offsets": [], "ts": "2026-11-29T10:00:00Z"}]})  # fmt: skip
    ctx = context(home, make_settings(memory={"review": True}))
    merged = render_memory("tabs", "the user indents with tabs", "feedback", "Use tabs, never spaces.",
                           {"source": "memd", "merged_from": ["tabs", "tabs-2"]})  # fmt: skip
    p = proposals.propose_directory_change(ctx, Place.project(KEY), {"tabs.md": merged, "tabs-2.md": None},
                                           reason="merge")  # fmt: skip
    assert p is not None
    review.accept(ctx, p.id, lock_timeout=10)
    data = cli_json(home, "why", "tabs", "--project", KEY)
    lines = {e["name"]: e["memory"]["sources"][0]["lines"][0]["text"] for e in data["merged_from"]}
    assert lines == {"tabs": "Use tabs, not spaces.", "tabs-2": "Tabs please, never spaces."}
