"""Gate and extraction on the real corpus (issue 4): through the daemon, and paused.

Everything is real: `memd run` is a process, the fake Messages API is a process
reached by the real `anthropic` client, SQLite and files are real. Expectations
(which sessions reach the model, what their extraction prompt ends with) are
derived from the corpus with the job's own pure pieces (`read_span`,
`unpaused`, `pre_gate`, `render`), so the tests follow the job's contract
rather than fixed numbers.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jobs.extract.gate import GATE_SYSTEM, pre_gate
from jobs.extract.prompt import EXTRACT_SYSTEM, SPAN_BUDGET_CHARS
from memd import state
from memd.ledger.pause import unpaused
from memd.memory.scan import scan_dir
from memd.redact.redactor import redact
from memd.transcripts.spans import read_span, render
from memd.tree import Home
from tests.conftest import CORPUS, require_corpus
from tests.fakeapi import op, ops_text, request_system_text, request_user_text
from tests.jobkit import ingest, write_session
from tests.jobs.extract.kit import records, snippets, state_rows, strings_in
from tests.procs import DaemonProc, FakeApiProc, memd_env, run_memd, wait_for

GATE_MARK = GATE_SYSTEM[:60]
EXTRACT_MARK = EXTRACT_SYSTEM[:60]
NO_MODEL_JOBS = {"memory": {"sessionMemory": {"enabled": False}, "dream": {"enabled": False}},
                 "memd": {"provider": "anthropic"}}  # fmt: skip

# Corpus files laid out for the daemon test, each for a reason:
DAEMON_FILES = [
    "spotter/short.jsonl",  # small, two human turns
    "spotter/tool_heavy.jsonl",  # tool output dominates the span
    "spotter/ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl",  # 2.1.x: <sid>/subagents/agent-*.jsonl beside it
    "agentcmd-claude/full-session-two.jsonl",  # six human turns
    "claude-code-viewer/5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl",  # 1.0.x inline sidechains, no human turn
    "claude-code-viewer/fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl",  # inline sidechains right before its human turn
    "fasthooks/sample_main_transcript.jsonl",  # compaction
    "fasthooks/sample_agent_sidechain.jsonl",  # a sub-agent transcript that is a file of its own
]
SUBAGENT_DIRS = ["spotter/ae4a77f8-aedd-4bc1-888f-c94edc91af04"]
LEAK_WITNESS = "claude-code-viewer/fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"


# -- laying out and reading the corpus -------------------------------------------------


def key_of(rel: str) -> str:
    """The project key `lay_out_corpus` gives a corpus folder, so both layouts agree."""
    return f"-corpus-{rel.split('/')[0]}"


def lay_out(home: Path, files: list[str], dirs: tuple[str, ...] | list[str] = ()) -> None:
    """Copy the chosen corpus files (and sub-agent folders) into `home` as Claude Code lays them out."""
    for rel in files:
        dest = home / "projects" / key_of(rel) / Path(rel).name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(CORPUS / rel, dest)
    for rel in dirs:
        shutil.copytree(CORPUS / rel, home / "projects" / key_of(rel) / Path(rel).name)


def write_settings(home: Path, settings: dict[str, Any]) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "settings.json").write_text(json.dumps(settings))


def sidechain_only_snippets(main_files: list[Path], side_files: list[Path]) -> set[str]:
    """Text that sub-agents wrote or read and the main thread of no session repeats.

    Inline `isSidechain: true` lines and sub-agent files are the sources; any
    snippet the main thread also carries (a Task prompt, a returned result) is
    dropped, since seeing it in a prompt would not be a leak.
    """
    main_text, side = [], []
    for path in main_files:
        for rec in records(path):
            target = side if rec.get("isSidechain") is True else main_text
            target.extend(strings_in(rec.get("message")))
    for path in side_files:
        for rec in records(path):
            side.extend(strings_in(rec.get("message")))
    joined = "\n".join(main_text)
    return {s for text in side for s in snippets(text) if s not in joined}


@dataclass
class Expect:
    """What the job should do with one session, predicted with the job's own pure pieces."""

    key: str
    sid: str
    human_turns: int
    reaches_gate: bool
    tail: str = ""  # the end of its extraction prompt, unique per session
    tag: str = ""


def expectations(home: Path) -> dict[str, Expect]:
    """Ingest a scratch copy with the real ledger and plan each session as `jobs.extract.run` does."""
    scratch = home.parent / f"{home.name}-scratch"
    shutil.copytree(home, scratch)
    ingest(scratch)
    conn = state.connect(Home(scratch).state_db, readonly=True)
    out: dict[str, Expect] = {}
    try:
        rows = conn.execute("SELECT key, session_id, path, format, safe_offset, safe_human_turns FROM sessions "
                            "WHERE is_subagent = 0").fetchall()  # fmt: skip
    finally:
        conn.close()
    renders: dict[str, str] = {}
    for r in rows:
        span = read_span(r["path"], 0, r["safe_offset"], r["format"])
        pieces, _ = unpaused(span.pieces, False)
        gate = r["safe_human_turns"] > 0 and pre_gate(pieces)[0]
        if gate:
            renders[r["session_id"]] = redact(render(pieces, SPAN_BUDGET_CHARS))
        tag = hashlib.sha1(r["session_id"].encode()).hexdigest()[:8]
        out[r["session_id"]] = Expect(r["key"], r["session_id"], r["safe_human_turns"], gate, "", tag)
    for sid, text in renders.items():
        out[sid].tail = own_passage(text, [t for s, t in renders.items() if s != sid])
    return out


def own_passage(text: str, others: list[str], size: int = 120) -> str:
    """The last passage of `text` that no other prompt contains (corpus sessions share boilerplate
    such as Claude Code's "[Request interrupted by user for tool use]" message)."""
    for end in range(len(text), size - 1, -size // 2):
        cand = text[end - size : end]
        if not any(cand in o for o in others):
            return cand
    raise AssertionError("no passage of its own in this session's prompt")


def session_ops(e: Expect) -> str:
    """One memory of every type for this session: user/feedback to the drawer, project/reference to the project."""
    return ops_text(
        op(scope="global", name=f"s{e.tag}-user", type="user", description=f"who the user of {e.tag} is",
           body="A backend developer. **Why:** said so. **How to apply:** skip the basics."),
        op(scope="global", name=f"s{e.tag}-feedback", type="feedback", description=f"a correction in {e.tag}",
           body="Run the tests before claiming success. **Why:** a broken build. **How to apply:** always."),
        op(scope="project", name=f"s{e.tag}-decision", type="project", description=f"a decision in {e.tag}",
           body="Releases are cut from main. **Why:** one line of history. **How to apply:** no release branches."),
        op(scope="project", name=f"s{e.tag}-board", type="reference", description=f"the board of {e.tag}",
           body="Issues live at https://example.invalid/board. **How to apply:** link tickets there."),
    )  # fmt: skip


def corpus_script(exp: dict[str, Expect]) -> dict[str, Any]:
    """Gate says yes; extraction answers per session, recognised by the tail of its prompt.

    No default reply: a request no rule expects gets a 400, the run fails and the
    waiting below times out, so a prompt that lost its session's text cannot pass.
    """
    rules: list[dict[str, Any]] = [{"if_system_contains": GATE_MARK, "reply": {"kind": "text", "text": "yes"}}]
    for e in exp.values():
        if e.reaches_gate:
            rules.append({"if_system_contains": EXTRACT_MARK, "if_user_contains": e.tail,
                          "reply": {"kind": "text", "text": session_ops(e)}})  # fmt: skip
    return {"rules": rules}


# -- reading the daemon's state ----------------------------------------------------------


_CURSORS = """
SELECT s.key, s.session_id, s.safe_offset, s.safe_human_turns, json_extract(c.value, '$.offset') AS cur,
       json_extract(c.value, '$.human_turns') AS cur_turns, json_extract(c.value, '$.paused') AS paused
FROM sessions s LEFT JOIN cursors c ON c.job = 'extract' AND c.target = 'session:' || s.key || ':' || s.session_id
WHERE s.is_subagent = 0
"""


def cursors_at_safe_offset(home: Path, sids: set[str]) -> bool:
    """Every listed session ingested and its extract cursor at the ledger's safe offset."""
    rows = {r["session_id"]: r for r in state_rows(home, _CURSORS)}
    return all(s in rows and rows[s]["cur"] == rows[s]["safe_offset"] for s in sids)


def wait_cursor(home: Path, sid: str, at_least_turns: int, timeout: float = 60) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        for r in state_rows(home, _CURSORS):
            if r["session_id"] == sid and r["safe_human_turns"] >= at_least_turns and r["cur"] == r["safe_offset"]:
                return r
        return None

    return wait_for(done, timeout, every=0.1)


def api_env(api: FakeApiProc) -> dict[str, str]:
    return memd_env(ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="test-key")


def bodies(api: FakeApiProc, mark: str) -> list[dict[str, Any]]:
    return [r["body"] for r in api.requests() if mark in request_system_text(r["body"])]


def index_text(directory: Path) -> str:
    return (directory / "MEMORY.md").read_text(encoding="utf-8")


# -- 1. the corpus through the daemon --------------------------------------------------


@pytest.mark.slow
def test_corpus_through_the_daemon_extracts_main_thread_only_into_the_right_scopes(tmp_path: Path) -> None:
    """memd started on a home of real transcripts: one gate and one extraction per session with
    a human turn, memories in the scope their type belongs to, nothing of any sub-agent sent."""
    require_corpus()
    home = tmp_path / "home"
    lay_out(home, DAEMON_FILES, SUBAGENT_DIRS)
    write_settings(home, NO_MODEL_JOBS)
    exp = expectations(home)
    yes = {s: e for s, e in exp.items() if e.reaches_gate}
    assert len(yes) >= 5 and len({e.tail for e in yes.values()}) == len(yes), "each session needs its own prompt tail"
    assert exp["5c0375b4-57a5-4f26-b12d-d022ee4e51b7"].human_turns == 0  # only a slash command: never due
    leaks = sidechain_only_snippets([CORPUS / f for f in DAEMON_FILES if "agent_sidechain" not in f], side_files())
    assert_leak_check_has_teeth(tmp_path, leaks)

    with FakeApiProc(tmp_path, corpus_script(exp)) as api, DaemonProc(home, env=api_env(api)) as d:
        wait_for(lambda: cursors_at_safe_offset(home, set(yes)), every=0.2)
        status = json.loads(run_memd(home, "status", "--json", env=api_env(api)).stdout)
        assert status["jobs"]["extract"]["due"] == 0, status["jobs"]["extract"]
        assert d.stop() == 0
        gate_bodies, extract_bodies = bodies(api, GATE_MARK), bodies(api, EXTRACT_MARK)
        everything = [request_user_text(r["body"]) for r in api.requests()]

    assert_runs_only_for_main_sessions(home, exp)
    assert len(gate_bodies) == len(yes) and len(extract_bodies) == len(yes), (len(gate_bodies), len(extract_bodies))
    assert {b["model"] for b in gate_bodies} == {"claude-haiku-4-5"}
    assert {b["model"] for b in extract_bodies} == {"claude-sonnet-4-6"}
    for e in yes.values():
        assert sum(e.tail in request_user_text(b) for b in extract_bodies) == 1, e.sid
    found = sorted({s for s in leaks for text in everything if s in text})
    assert not found, f"sub-agent text reached the model: {found[:3]}"
    assert_memories_in_their_scopes(home, yes)


def side_files() -> list[Path]:
    """Sub-agent transcripts of the laid-out sessions: the 2.1.x folder and the file of its own."""
    subs = [p for d in SUBAGENT_DIRS for p in sorted((CORPUS / d).rglob("*.jsonl"))]
    return [CORPUS / "fasthooks/sample_agent_sidechain.jsonl", *subs]


def assert_leak_check_has_teeth(tmp_path: Path, leaks: set[str]) -> None:
    """Had the span reader kept sidechain lines, the extraction prompt would carry some of `leaks`."""
    assert len(leaks) > 20
    leaky = tmp_path / "leaky.jsonl"
    with open(leaky, "w") as fh:
        for rec in records(CORPUS / LEAK_WITNESS):
            rec["isSidechain"] = False
            fh.write(json.dumps(rec) + "\n")
    pieces = read_span(leaky, 0, leaky.stat().st_size).pieces
    rendered = render(pieces, SPAN_BUDGET_CHARS)
    assert any(s in rendered for s in leaks), "the leak check would not notice a leak"


def assert_runs_only_for_main_sessions(home: Path, exp: dict[str, Expect]) -> None:
    """Sub-agent transcripts are not sessions: no extract run, no cursor of their own."""
    mains = {f"session:{e.key}:{e.sid}" for e in exp.values()}
    subs = state_rows(home, "SELECT key, session_id FROM sessions WHERE is_subagent = 1")
    assert {r["session_id"] for r in subs} >= {"sample_agent_sidechain"}
    runs = state_rows(home, "SELECT target, outcome, reason FROM runs WHERE job = 'extract'")
    assert runs and {r["target"] for r in runs} <= mains, {r["target"] for r in runs} - mains
    sub_ids = {r["session_id"] for r in subs} | {p.stem for p in side_files()}
    assert not any(r["target"].rpartition(":")[2] in sub_ids for r in runs)
    cursors = state_rows(home, "SELECT target FROM cursors WHERE job = 'extract'")
    assert {c["target"] for c in cursors} <= mains
    for e in exp.values():
        if e.reaches_gate:
            mine = [r for r in runs if r["target"] == f"session:{e.key}:{e.sid}" and r["outcome"] == "ok"]
            assert [r["reason"] for r in mine] == ["gate: yes"], (e.sid, mine)


def assert_memories_in_their_scopes(home: Path, yes: dict[str, Expect]) -> None:
    """User/feedback in the drawer, project/reference in the session's project; every one indexed."""
    drawer = scan_dir(home / "memory", "global", None)
    assert drawer.problems == []
    assert {m.type for m in drawer.memories} == {"user", "feedback"}
    assert {m.name for m in drawer.memories} == {f"s{e.tag}-{k}" for e in yes.values() for k in ("user", "feedback")}
    for m in drawer.memories:
        assert f"- [{m.name}]({m.path.name}) — {m.description}" in index_text(home / "memory")
    for key in {e.key for e in yes.values()}:
        mdir = home / "projects" / key / "memory"
        got = scan_dir(mdir, "project", key)
        assert got.problems == [] and {m.type for m in got.memories} == {"project", "reference"}
        want = {f"s{e.tag}-{k}" for e in yes.values() if e.key == key for k in ("decision", "board")}
        assert {m.name for m in got.memories} == want
        for m in got.memories:
            assert f"- [{m.name}]({m.path.name}) — {m.description}" in index_text(mdir)
            assert m.metadata["provider"] == "anthropic" and m.metadata["session"] in yes


# -- 2. a paused session writes nothing ------------------------------------------------

PAUSED_FILE = "spotter/tool_heavy.jsonl"
PAUSED_SAYING = "Remember that we always deploy the paused-marker service on Tuesdays, never on Fridays."
RESUMED_SAYING = "Remember that we always review the resumed-marker migrations with the database team first."


def pause_record(first: dict[str, Any], command: str = "/pause-memory") -> dict[str, Any]:
    """The record Claude Code writes for a slash command, shaped like the corpus session's own records."""
    name = command.lstrip("/")
    return {"parentUuid": None, "isSidechain": False, "userType": "external", "cwd": first.get("cwd", "/"),
            "sessionId": first.get("sessionId"), "version": first.get("version"), "type": "user",
            "message": {"role": "user", "content": f"<command-message>{name} is running…</command-message>\n"
                                                   f"<command-name>{command}</command-name>"},
            "uuid": "11111111-2222-3333-4444-555555555555", "timestamp": first.get("timestamp")}  # fmt: skip


def paused_copy(src: Path, dest: Path) -> list[str]:
    """`src` with a pause command as its first record; returns the main-thread snippets after it."""
    recs = list(records(src))
    first = next(r for r in recs if r.get("sessionId"))
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text("".join(json.dumps(r) + "\n" for r in [pause_record(first), *recs]))
    said = [s for r in recs if r.get("type") in ("user", "assistant") and r.get("isSidechain") is not True
            for text in strings_in(r.get("message")) for s in snippets(text, 30)]  # fmt: skip
    return sorted(set(said))


@pytest.mark.slow
def test_paused_corpus_session_writes_nothing_until_resumed(tmp_path: Path) -> None:
    """/pause-memory as a corpus session's first record: no request, no file, also for a durable
    turn appended later; after /toggle-memory only the new turn reaches the model."""
    require_corpus()
    home = tmp_path / "home"
    key, sid = key_of(PAUSED_FILE), Path(PAUSED_FILE).stem
    transcript = home / "projects" / key / f"{sid}.jsonl"
    paused_said = paused_copy(CORPUS / PAUSED_FILE, transcript) + [PAUSED_SAYING]
    assert len(paused_said) > 10
    write_settings(home, NO_MODEL_JOBS)
    script = {"rules": [{"if_system_contains": GATE_MARK, "reply": {"kind": "text", "text": "yes"}},
                        {"if_system_contains": EXTRACT_MARK, "reply": {"kind": "text", "text": ops_text(
                            op(scope="project", name="review-migrations", type="project",
                               description="migrations are reviewed with the database team"))}}]}  # fmt: skip
    memory_dirs = [home / "memory", home / "projects" / key / "memory"]
    with FakeApiProc(tmp_path, script) as api, DaemonProc(home, env=api_env(api)) as d:
        first = wait_cursor(home, sid, 1)
        assert first["paused"] == 1 and api.requests() == []
        write_session(transcript, [("user", PAUSED_SAYING), ("assistant", "Noted.")], start=900)
        wait_cursor(home, sid, first["safe_human_turns"] + 1)
        assert api.requests() == []
        assert memory_files(memory_dirs) == []

        write_session(transcript, [("user", "<command-name>/toggle-memory</command-name>"),
                                   ("user", RESUMED_SAYING), ("assistant", "Will do.")], start=950)  # fmt: skip
        wait_cursor(home, sid, first["safe_human_turns"] + 2)
        wait_for(lambda: (home / "projects" / key / "memory" / "review-migrations.md").exists())
        assert d.stop() == 0
        sent = [request_user_text(r["body"]) for r in api.requests()]

    assert len(sent) == 2 and all(RESUMED_SAYING in s for s in sent)  # the resumed turn did reach gate and extraction
    leaked = [s for s in paused_said for text in sent if s in text]
    assert not leaked, f"paused text reached the model: {leaked[:3]}"
    assert memory_files(memory_dirs) == [memory_dirs[1] / "review-migrations.md"]


def memory_files(dirs: list[Path]) -> list[Path]:
    """Memory files proper (the index and the drawer render do not count)."""
    return sorted(p for d in dirs for p in d.glob("*.md") if p.name != "MEMORY.md")


