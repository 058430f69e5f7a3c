"""Gate and extraction on the real corpus (issue 4): through the daemon, paused, and under kill -9.

Everything is real: `memd run` is a process, the fake Messages API is a process
(or, for the kill test, a server inside the killed process) reached by the real
`anthropic` client, SQLite and files are real. Expectations (which sessions
reach the model, what their extraction prompt ends with) are derived from the
corpus with the job's own pure pieces (`read_span`, `unpaused`, `pre_gate`,
`render`), so the tests follow the job's contract rather than fixed numbers.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import jobs.extract as extract
from memd import state
from memd.memories import parse_memory, render_memory, scan_dir, write_memory
from memd.redact import redact
from memd.spans import read_span, render
from memd.tree import Home
from tests.conftest import CORPUS, REPO, require_corpus
from tests.fakeapi import op, ops_text, request_system_text, request_user_text
from tests.jobkit import ingest, write_session
from tests.procs import DaemonProc, FakeApiProc, memd_env, run_memd, wait_for

GATE_MARK = extract.GATE_SYSTEM[:60]
EXTRACT_MARK = extract.EXTRACT_SYSTEM[:60]
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


def records(path: Path) -> Iterator[dict[str, Any]]:
    for line in path.read_bytes().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            yield rec


def strings_in(value: Any) -> Iterator[str]:
    """Every string inside a record's message, however deeply nested (text, tool inputs, results)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings_in(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings_in(v)


_PLAIN = re.compile(r"^[\x20-\x7e]+$")


def snippets(text: str, min_len: int = 40) -> Iterator[str]:
    """Single-line ASCII pieces without quotes or backslashes: identical raw and JSON-escaped,
    so finding (or not finding) one in a prompt means the same in every rendering."""
    for line in text.splitlines():
        s = line.strip()
        if len(s) >= min_len and _PLAIN.match(s) and '"' not in s and "\\" not in s:
            yield s[:80]


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
        pieces, _ = extract.unpaused(span.pieces, False)
        gate = r["safe_human_turns"] > 0 and extract.pre_gate(pieces)[0]
        if gate:
            renders[r["session_id"]] = redact(render(pieces, extract.SPAN_BUDGET_CHARS))
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


def state_rows(home: Path, sql: str, args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    """A read-only look at the daemon's state DB (it keeps writing meanwhile: WAL)."""
    db = Home(home).state_db
    if not db.exists():
        return []
    conn = state.connect(db, readonly=True)
    try:
        return [dict(r) for r in conn.execute(sql, args)]
    except Exception:  # noqa: BLE001 - tables may not exist yet while the daemon starts
        return []
    finally:
        conn.close()


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
        wait_for(lambda: cursors_at_safe_offset(home, set(yes)), 90, every=0.2)
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
    rendered = render(pieces, extract.SPAN_BUDGET_CHARS)
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
        wait_for(lambda: (home / "projects" / key / "memory" / "review-migrations.md").exists(), 30)
        assert d.stop() == 0
        sent = [request_user_text(r["body"]) for r in api.requests()]

    assert len(sent) == 2 and all(RESUMED_SAYING in s for s in sent)  # the resumed turn did reach gate and extraction
    leaked = [s for s in paused_said for text in sent if s in text]
    assert not leaked, f"paused text reached the model: {leaked[:3]}"
    assert memory_files(memory_dirs) == [memory_dirs[1] / "review-migrations.md"]


def memory_files(dirs: list[Path]) -> list[Path]:
    """Memory files proper (the index and the drawer render do not count)."""
    return sorted(p for d in dirs for p in d.glob("*.md") if p.name != "MEMORY.md")


# -- 3. kill -9 during the apply -------------------------------------------------------

KILL_KEY, KILL_SID = "-work-repo", "s1"
KILL_TARGET = f"session:{KILL_KEY}:{KILL_SID}"
TOPICS = "deploy staging release pipeline linter database migration checklist".split()
FILLER = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
          "quebec romeo sierra tango uniform victor whiskey xray yankee zulu").split()  # fmt: skip
KILLS = 36

# The killed process: imports once, then forks one child per request, so a kill
# costs milliseconds instead of the two seconds `import anthropic` takes. The
# child runs the job through `memd.runner.run_job` against a FakeAnthropic of its
# own. Protocol on the original stdout (everything else printed goes to stderr):
# "run HOME" → "pid PID T_FORK"; "reap" → "exit STATUS". The parent kills only
# between the two, while the child is unreaped, so its pid cannot be reused.
# First/last memory writes are reported on stderr to calibrate the kill delays.
FORK_SERVER = r'''
import os, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
PROTO = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
import structlog

def timing(_logger, _name, event):
    if event.get("event") in ("memory.written", "view.written", "job.finished"):
        print(f"T {time.monotonic():.6f} {event['event']}", file=sys.stderr, flush=True)
    raise structlog.DropEvent

structlog.configure(processors=[timing])
import anthropic  # noqa: F401 - everything the job imports lazily is imported before forking, on purpose
import jobs.extract as extract
import memd.indexer, memd.llm, memd.memwrite, memd.opsvalidate, memd.search  # noqa: E401,F401
from memd.jobctx import Target
from memd.runner import run_job
from tests.fakeapi import FakeAnthropic, text
from tests.jobkit import context, make_settings

REPLY = Path(sys.argv[2]).read_text()
TARGET = Target.parse(sys.argv[3])

def child(home):
    with FakeAnthropic([text("yes"), text(REPLY)]) as api:
        ctx = context(Path(home), make_settings(), fake_url=api.base_url)
        result = run_job(ctx, extract, TARGET)
    return 0 if result.outcome == "ok" and result.details.get("gate") == "yes" else 3

for line in sys.stdin:
    cmd, _, home = line.strip().partition(" ")
    if cmd != "run":
        continue
    pid = os.fork()
    if pid == 0:
        try:
            code = child(home)
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 4
        os._exit(code)
    print(f"pid {pid} {time.monotonic():.6f}", file=PROTO, flush=True)
    sys.stdin.readline()
    _, status = os.waitpid(pid, 0)
    print(f"exit {status}", file=PROTO, flush=True)
'''


def filler(rng: random.Random, size: int) -> str:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < size:
        words.append(rng.choice(FILLER))
    return " ".join(words)


def kill_home(home: Path, rng: random.Random) -> str:
    """A session worth extracting, 8 memories it touches (all findable by search, so shown
    to the model and updatable), and the model's answer: 8 updates and 32 adds of 6–8 KB."""
    write_session(home / "projects" / KILL_KEY / f"{KILL_SID}.jsonl",
                  [("user", f"Remember our {' '.join(TOPICS)} rules for every future change."),
                   ("assistant", "Noted.")])  # fmt: skip
    kinds = [("global", "user"), ("global", "feedback"), ("project", "project"), ("project", "reference")]
    existing = []
    for i, topic in enumerate(TOPICS):
        scope, kind = kinds[i % 4]
        mdir = home / "memory" if scope == "global" else home / "projects" / KILL_KEY / "memory"
        name = f"{topic}-notes"
        body = f"Old notes on {' '.join(TOPICS)}. {filler(rng, 1500)}"
        write_memory(mdir, name, render_memory(name, f"old notes on {topic}", kind, body, {"source": "memd"}))
        existing.append(op(op="update", scope=scope, name=name, type=kind, description=f"new notes on {topic}",
                           body=filler(rng, rng.randint(6000, 7800))))  # fmt: skip
    added = [op(scope=kinds[i % 4][0], type=kinds[i % 4][1], name=f"added-{i:02d}", description=f"added memory {i}",
                body=filler(rng, rng.randint(6000, 7800))) for i in range(32)]  # fmt: skip
    from memd.indexer import refresh_all

    refresh_all(Home(home))
    ingest(home)
    return ops_text(*existing, *added)


def md_files(home: Path) -> dict[str, bytes]:
    """Every Markdown file memd writes for readers: memories, MEMORY.md, the drawer render."""
    out = {}
    for path in [*home.glob("memory/*.md"), *home.glob("projects/*/memory/*.md"), *home.glob("*.md")]:
        out[str(path.relative_to(home))] = path.read_bytes()
    return out


def is_memory(rel: str) -> bool:
    return "/" in rel and not rel.endswith("/MEMORY.md")


def tree_outside(root: Path, skip: tuple[Path, ...]) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file under `root` outside the `skip` paths: none of them may change."""
    out = {}
    for p in root.rglob("*"):
        if p.is_file() and not any(p == s or s in p.parents for s in skip):
            st = p.stat()
            out[str(p)] = (st.st_size, st.st_mtime_ns)
    return out


@dataclass
class ForkServer:
    """The parent's side of FORK_SERVER."""

    proc: subprocess.Popen[str]
    stderr_path: Path

    def run(self, home: Path, kill_at: float | None = None,
            after: Callable[[], bool] | None = None) -> tuple[int, float]:  # fmt: skip
        """Run the job once; SIGKILL it `kill_at` seconds after the fork, or after `after()` first holds.

        Returns the wait status and the fork time. The child is killed while it runs
        or is an unreaped zombie, so the pid can never be another process's.
        """
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(f"run {home}\n")
        self.proc.stdin.flush()
        _, pid, t_fork = self.proc.stdout.readline().split()
        if kill_at is not None:
            start = float(t_fork)
            if after is not None:
                deadline = start + 10
                while not after() and time.monotonic() < deadline:
                    time.sleep(0.0005)
                start = time.monotonic()
            time.sleep(max(0.0, start + kill_at - time.monotonic()))
            os.kill(int(pid), signal.SIGKILL)
        self.proc.stdin.write("reap\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline().split()[1]), float(t_fork)

    def marks_since(self, t0: float) -> list[tuple[float, str]]:
        """(seconds after the fork, event) of the timing lines the child printed."""
        out = []
        for line in self.stderr_path.read_text(errors="replace").splitlines():
            if line.startswith("T "):
                _, t, ev = line.split()
                if float(t) >= t0:
                    out.append((float(t) - t0, ev))
        return out

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(10)


def start_fork_server(work: Path, reply: str) -> ForkServer:
    """The server runs with HOME and TMPDIR pointing at empty folders, so a stray write there shows."""
    script, reply_path, stderr_path = work / "fork_server.py", work / "reply.json", work / "fork_server.err"
    script.write_text(FORK_SERVER)
    reply_path.write_text(reply)
    for d in ("user-home", "tmpdir"):
        (work / d).mkdir()
    env = memd_env(HOME=str(work / "user-home"), TMPDIR=str(work / "tmpdir"))
    with open(stderr_path, "w") as err:
        proc = subprocess.Popen([sys.executable, str(script), str(REPO), str(reply_path), KILL_TARGET], env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)  # fmt: skip
    return ForkServer(proc, stderr_path)


def classify(files: dict[str, bytes], old: dict[str, bytes], new: dict[str, bytes]) -> str:
    """Where a kill landed, read from what it left."""
    changing = [k for k in new if is_memory(k) and new[k] != old.get(k)]
    written = [k for k in changing if files.get(k) == new[k]]
    if not written:
        return "before the apply"
    if len(written) < len(changing):
        return "during the writes"
    return "during the index refresh" if files != new else "after the apply"


def check_whole(home: Path, old: dict[str, bytes], new: dict[str, bytes]) -> dict[str, bytes]:
    """The invariant: every file is its old or its new self, whole; memories parse; the cursor rule holds."""
    files = md_files(home)
    assert set(old) <= set(files) <= set(old) | set(new), "a file vanished or an unexpected one appeared"
    for rel, data in files.items():
        assert data in (old.get(rel), new.get(rel)), f"{rel}: neither the old nor the new bytes ({len(data)} B)"
        if is_memory(rel):
            parse_memory(home / rel, data)
    if state_rows(home, "SELECT 1 FROM cursors WHERE job='extract' AND target=?", (KILL_TARGET,)):
        assert files == new, "the cursor moved before every output was durable"
    return files


def reset(template: Path, home: Path) -> None:
    shutil.rmtree(home, ignore_errors=True)
    shutil.copytree(template, home)


def test_kill_9_during_the_apply_leaves_old_or_new_files(tmp_path: Path) -> None:
    """SIGKILL at random moments, most of them inside the apply: every file a reader can open is
    whole and either its old or its new self, the cursor never runs ahead, nothing leaks outside."""
    rng = random.Random(4)
    home, template, work = tmp_path / "home", tmp_path / "template", tmp_path / "work"
    work.mkdir()
    reply = kill_home(home, rng)
    shutil.copytree(home, template)
    old = md_files(home)
    server = start_fork_server(work, reply)
    try:
        new, writes, end = calibrate(server, template, home)
        assert sum(1 for k in new if is_memory(k) and new[k] != old.get(k)) == 40
        outside = tree_outside(tmp_path, (home, server.stderr_path))
        landed: dict[str, int] = {}
        strays = 0  # kills that left an atomic write's hidden temp file behind (harmless: never read)
        for i in range(KILLS):
            reset(template, home)
            if i % 3:  # two kills in three aim at the writes: some delay after the first memory is replaced
                status, _ = server.run(home, rng.uniform(0.0, writes[1] - writes[0] + 0.03), first_write(home))
            else:  # the rest anywhere in the run, and a little past it
                status, _ = server.run(home, rng.uniform(0.0, end * 1.2))
            files = check_whole(home, old, new)
            where = classify(files, old, new) if os.WIFSIGNALED(status) else "after the run ended"
            landed[where] = landed.get(where, 0) + 1
            strays += any(home.rglob(".*.tmp"))
            assert tree_outside(tmp_path, (home, server.stderr_path)) == outside
        print(f"kill -9 x{KILLS}: {landed}; writes at {writes[0] * 1000:.0f}-{writes[1] * 1000:.0f} ms "
              f"of a {end * 1000:.0f} ms run; {strays} left a hidden temp file")  # fmt: skip
        assert landed.get("during the writes", 0) >= 5, landed
    finally:
        server.close()


def first_write(home: Path) -> Callable[[], bool]:
    """True once the job replaced the first memory its answer updates (a rename: a new inode)."""
    path = home / "memory" / f"{TOPICS[0]}-notes.md"
    inode = path.stat().st_ino

    def replaced() -> bool:
        try:
            return path.stat().st_ino != inode
        except FileNotFoundError:
            return False

    return replaced


def calibrate(server: ForkServer, template: Path, home: Path) -> tuple[dict[str, bytes], tuple[float, float], float]:
    """Three whole runs: the new files, and the median time (after the fork) of the first and last
    memory write and of the end, so the kills can aim at the writes on this machine today."""
    firsts, lasts, ends = [], [], []
    for _ in range(3):
        reset(template, home)
        status, t0 = server.run(home)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, server.stderr_path.read_text()[-3000:]
        marks = server.marks_since(t0)
        writes = [t for t, ev in marks if ev == "memory.written"]
        firsts.append(writes[0])
        lasts.append(writes[-1])
        ends.append(max(t for t, ev in marks if ev == "job.finished"))
    new = md_files(home)
    return new, (sorted(firsts)[1], sorted(lasts)[1]), sorted(ends)[1]


def test_rerun_after_a_crash_before_the_index_refresh_rebuilds_memory_md(tmp_path: Path) -> None:
    """The state a kill between the last memory write and the refresh leaves (see the test above:
    "during the index refresh"), built exactly: every memory file new, MEMORY.md and the cursor old."""
    rng = random.Random(4)
    home, template, work = tmp_path / "home", tmp_path / "template", tmp_path / "work"
    work.mkdir()
    reply = kill_home(home, rng)
    shutil.copytree(home, template)
    server = start_fork_server(work, reply)
    try:
        server.run(home)
        new = md_files(home)
        reset(template, home)
        for rel, data in new.items():
            if is_memory(rel):
                (home / rel).write_bytes(data)
        status, _ = server.run(home)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    finally:
        server.close()
    assert state_rows(home, "SELECT 1 FROM cursors WHERE job='extract' AND target=?", (KILL_TARGET,))
    assert md_files(home)["memory/MEMORY.md"] == new["memory/MEMORY.md"]
