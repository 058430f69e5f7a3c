"""Shared pieces of the fault tests: a scripted corpus, the fake model, fast daemons, invariants.

Everything here checks memd from the outside: files on disk, the state
database as SQLite sees it, the fake model server's request log. Nothing in
memd is mocked.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jobs.extract as extract
import jobs.summary as summary
from memd import settings as st
from memd.cli import main
from memd.index.render import DRAWER_HEADER, DRAWER_TITLE, INDEX_END_PREFIX, INDEX_HEADER
from memd.index.search import open_readonly
from memd.job.context import JobContext
from memd.ledger import store as ledger
from memd.ledger.sessions import session_json
from memd.memory.names import INDEX_NAME
from memd.memory.scan import scan_dir
from memd.tree import Home
from tests.procs import WAIT_S, memd_env, wait_for
from tests.reference import claude_counts

REPO = Path(__file__).resolve().parents[2]
FOOTER_PREFIX = "<!-- memd session summary"  # jobs.summary.FOOTER_PREFIX, spelled out: the SPEC's contract
MARKER = re.compile(r"\bFACT-([GP])-(\d{4})\b")
END_OF_BODY = re.compile(r"\[end FACT-[GP]-\d{4}\]$")
INDEX_LINE = re.compile(r"^- \[.+\]\(.+\) — .+$")
COMPARED = ("records", "bad_lines", "human_turns", "assistant_turns", "tool_calls", "tool_calls_pending",
            "tokens", "usage", "compactions", "paused")  # fmt: skip

# Low thresholds so summaries happen in short sessions; dream off (it merges
# memories, which would make "the same final state" depend on timing).
SETTINGS: dict[str, Any] = {
    "memory": {
        "extractEveryTurns": 1,
        "sessionMemory": {"minInitTokens": 500, "minUpdateTokens": 200, "toolCallsBetween": 1},
        "dream": {"enabled": False},
    },
    "memd": {"provider": "anthropic", "maxRetries": 2, "timeoutSeconds": 20},
}


def write_settings(home: Path, settings: dict[str, Any] | None = None) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "settings.json").write_text(json.dumps(settings or SETTINGS, indent=1))


# --------------------------------------------------------------------------- what a run says


class RecordingLog:
    """The logger a job context carries (`JobContext.log`), recording what a run says."""

    def __init__(self, records: list[dict[str, Any]] | None = None, bound: dict[str, Any] | None = None) -> None:
        self.records = [] if records is None else records
        self.bound = bound or {}

    def bind(self, **kw: Any) -> RecordingLog:
        return RecordingLog(self.records, {**self.bound, **kw})

    def _rec(self, level: str, event: str, **kw: Any) -> None:
        self.records.append({"level": level, "event": event, **self.bound, **kw})

    def debug(self, event: str, **kw: Any) -> None:
        self._rec("debug", event, **kw)

    def info(self, event: str, **kw: Any) -> None:
        self._rec("info", event, **kw)

    def warning(self, event: str, **kw: Any) -> None:
        self._rec("warning", event, **kw)

    def error(self, event: str, **kw: Any) -> None:
        self._rec("error", event, **kw)

    def exception(self, event: str, **kw: Any) -> None:
        self._rec("error", event, traceback="(exception)", **kw)

    critical = error


def one_line(text: Any) -> bool:
    return isinstance(text, str) and "\n" not in text and "\r" not in text and 0 < len(text) <= 1000


# --------------------------------------------------------------------------- the fake model


class FakeModel:
    """tests/faults/fakemodel.py as a process (answers from the request; see there)."""

    def __init__(self, tmp: Path, *, max_delay: float = 0.0, seed: int = 0) -> None:
        self.tmp = tmp
        tmp.mkdir(parents=True, exist_ok=True)
        self.port_file = tmp / "fakemodel-port"
        self.record = tmp / "fakemodel-requests.jsonl"
        self.events = tmp / "fakemodel-answers.jsonl"
        self.args = ["--max-delay", str(max_delay), "--seed", str(seed), "--events", str(self.events)]
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> FakeModel:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.faults.fakemodel", "--port-file", str(self.port_file),
                                      "--record", str(self.record), *self.args], cwd=REPO)  # fmt: skip
        wait_for(lambda: self.port_file.exists() and self.port_file.read_text().strip())
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port_file.read_text().strip()}"

    def env(self) -> dict[str, str]:
        return memd_env(ANTHROPIC_BASE_URL=self.url, ANTHROPIC_API_KEY="test-key")

    def requests(self) -> list[dict[str, Any]]:
        if not self.record.exists():
            return []
        out = []
        for line in self.record.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def answers(self) -> list[dict[str, Any]]:
        """(kind, wall-clock time sent) of every answer so far."""
        if not self.events.exists():
            return []
        out = []
        for line in self.events.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)


# --------------------------------------------------------------------------- daemons forked from a warm server

# Modules a daemon imports on its way to its first model call. Importing the
# anthropic SDK alone takes about 1.4 s; a crash loop that paid it after every
# restart would spend its budget importing instead of running jobs. The
# forkserver imports them once; every daemon is a fresh fork of it running
# `memd --home H run` through memd's own click entry point.
PRELOAD = ["anthropic", "httpx", "memd.cli", "memd.cli.daemon", "memd.daemon.loop", "memd.llm.client", "memd.logs.events",
           "memd.index.refresh", "memd.write.apply", "jobs.extract", "jobs.extract.prompt", "jobs.extract.offline",
           "jobs.summary", "jobs.index", "structlog",
           "apscheduler.schedulers.background", "apscheduler.executors.pool", "watchdog.observers",
           "tests.faults.kit"]  # fmt: skip
_CTX: Any = None


def _forkserver() -> Any:
    global _CTX
    if _CTX is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        _CTX = ctx
    return _CTX


def _daemon_main(home: str, env: dict[str, str], out: str, umask: int) -> None:
    """The child: `memd --home HOME run`, stdout and stderr to `out`."""
    os.umask(umask)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    for k in [k for k in os.environ if k.startswith("ANTHROPIC_")]:
        del os.environ[k]
    os.environ.update(env)

    main(["--home", home, "run"], prog_name="memd")


class ForkedDaemon:
    """`memd run` on a home, in a process forked from a preloaded server; killed with SIGKILL."""

    def __init__(self, home: Path, env: dict[str, str], out: Path, umask: int = 0o022) -> None:
        self.home = home
        self.out = out
        # daemon=True: if a test fails before its kill, the process is terminated at exit
        # instead of pytest waiting for it forever (memd's daemon starts no processes of its own).
        self.proc = _forkserver().Process(target=_daemon_main, args=(str(home), dict(env), str(out), umask),
                                          daemon=True)  # fmt: skip

    def start(self) -> ForkedDaemon:
        self.proc.start()
        return self

    @property
    def pid(self) -> int:
        return int(self.proc.pid or 0)

    def ready(self) -> bool:
        """This daemon holds the home: its pid is in the pid file (a killed one's file may linger)."""
        try:
            return json.loads((self.home / "memd" / "daemon.json").read_text()).get("pid") == self.pid
        except (OSError, ValueError):
            return False

    def wait_ready(self, timeout: float = WAIT_S) -> None:
        def ok() -> bool:
            if self.proc.exitcode is not None:
                tail = self.out.read_text(errors="replace")[-2000:] if self.out.exists() else ""
                raise AssertionError(f"daemon exited {self.proc.exitcode} before it was ready:\n{tail}")
            return self.ready()

        wait_for(ok, timeout, every=0.005)

    def kill(self) -> None:
        if self.proc.exitcode is None:
            os.kill(self.pid, signal.SIGKILL)
        self.proc.join(10)
        assert self.proc.exitcode is not None, "a SIGKILLed daemon did not exit"


# --------------------------------------------------------------------------- a scripted corpus


@dataclass
class Corpus:
    """Transcript appends in the order an agent would make them, and what they should yield."""

    writes: list[tuple[str, bytes]] = field(default_factory=list)  # (path relative to the home, bytes)
    markers: set[tuple[str, str]] = field(default_factory=set)  # (scope letter, number)
    marker_homes: list[tuple[str, str, str]] = field(default_factory=list)  # (scope letter, number, project key)

    def expected_names(self) -> dict[str, set[str]]:
        """label → the memory names the transcripts ask for (the fake model's names for the markers)."""
        out: dict[str, set[str]] = {"global": set()}
        for scope, number, key in self.marker_homes:
            label = "global" if scope == "G" else f"project:{key}"
            out.setdefault(label, set()).add(f"fact-{scope.lower()}-{number}")
        return out

    def files(self) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for rel, data in self.writes:
            out[rel] = out.get(rel, b"") + data
        return out


TOPICS = ["the billing service", "the importer", "the web shop", "the nightly job", "la facturation", "数据管道"]
CHAT = ["thanks, that looks fine — let's move on to the next step of the task",
        "ok, and what does the function below return when the list is empty?",
        "hmm, run the tests again and show me only the failures please",
        "merci, c'est bon pour moi; on continue avec la suite"]  # fmt: skip


def _line(rec: dict[str, Any]) -> bytes:
    return (json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8")


def turn_group(sid: str, g: int, text: str, parent: str | None = None, base: dict[str, Any] | None = None) -> bytes:
    """One exchange as Claude Code writes it: the user's turn, an assistant response in two lines
    sharing a `message.id` (text, then a tool call, usage growing), the tool result, a final answer."""
    base = base or {"sessionId": sid, "cwd": "/work/app", "version": "2.1.0", "isSidechain": False,
                    "timestamp": f"2026-11-29T12:{g % 60:02d}:00.000Z", "userType": "external"}  # fmt: skip
    lines: list[bytes] = []
    uid = f"{sid[:8]}-u{g}"
    lines.append(_line({**base, "type": "user", "uuid": uid, "parentUuid": parent,
                        "message": {"role": "user", "content": text}}))  # fmt: skip
    mid = f"msg_{sid[:8]}_{g}a"
    tid = f"toolu_{sid[:8]}_{g}"
    usage = {"input_tokens": 100 + g, "output_tokens": 3, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 50}  # fmt: skip
    lines.append(_line({**base, "type": "assistant", "uuid": uid + "a1", "parentUuid": uid,
                        "message": {"id": mid, "role": "assistant", "model": "claude-sonnet-4-6",
                                    "content": [{"type": "text", "text": "Let me look at the code first."}],
                                    "usage": usage}}))  # fmt: skip
    lines.append(_line({**base, "type": "assistant", "uuid": uid + "a2", "parentUuid": uid + "a1",
                        "message": {"id": mid, "role": "assistant", "model": "claude-sonnet-4-6",
                                    "content": [{"type": "tool_use", "id": tid, "name": "Bash",
                                                 "input": {"command": f"grep -rn deploy src/ # {g}"}}],
                                    "usage": {**usage, "output_tokens": 40}}}))  # fmt: skip
    output = "\n".join(f"src/app{i}.py:{i * 7}: deploy_{i}() — élan {i}" for i in range(8))
    lines.append(_line({**base, "type": "user", "uuid": uid + "r", "parentUuid": uid + "a2",
                        "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid,
                                                                 "content": output}]}}))  # fmt: skip
    mid2 = f"msg_{sid[:8]}_{g}b"
    lines.append(_line({**base, "type": "assistant", "uuid": uid + "a3", "parentUuid": uid + "r",
                        "message": {"id": mid2, "role": "assistant", "model": "claude-sonnet-4-6",
                                    "content": [{"type": "text", "text": "Done: the deploy calls are in "
                                                 "src/app*.py; nothing else needs to change here."}],
                                    "usage": {**usage, "output_tokens": 25}}}))  # fmt: skip
    return b"".join(lines)


def build_corpus(seed: int, *, projects: int = 2, sessions: int = 3, groups: int = 6, split_share: float = 0.3) -> Corpus:
    """Claude Code transcripts: user turns (some with durable markers), tool calls and results,
    assistant responses written as several lines sharing one `message.id` (as the real
    agent does, with growing usage). Some appends end mid-line (even mid-character) and
    are finished by a later append."""
    rng = random.Random(seed)
    corpus = Corpus()
    per_session: list[list[tuple[str, bytes]]] = []
    number = 0
    for p in range(projects):
        key = f"-work-proj{p}"
        for s in range(sessions):
            sid = f"{p:02d}{s:02d}aaaa-0000-4000-8000-{seed:012d}"
            rel = f"projects/{key}/{sid}.jsonl"
            chunks: list[tuple[str, bytes]] = []
            parent = None
            for g in range(groups):
                ts = f"2026-11-29T{10 + p:02d}:{s * 10 + g:02d}:00.000Z"
                base = {"sessionId": sid, "cwd": f"/work/proj{p}", "version": "2.1.0", "isSidechain": False,
                        "timestamp": ts, "userType": "external"}  # fmt: skip
                kind = rng.random()
                if kind < 0.55:
                    number += 1
                    scope = "G" if rng.random() < 0.4 else "P"
                    corpus.markers.add((scope, f"{number:04d}"))
                    corpus.marker_homes.append((scope, f"{number:04d}", key))
                    text = (f"Please remember FACT-{scope}-{number:04d} for the future: we always deploy "
                            f"{rng.choice(TOPICS)} on Tuesdays, because the on-call rota needs it.")  # fmt: skip
                    if rng.random() < 0.25:
                        number += 1
                        corpus.markers.add(("P", f"{number:04d}"))
                        corpus.marker_homes.append(("P", f"{number:04d}", key))
                        text += f" Also FACT-P-{number:04d}: the staging branch is called preprod."
                else:
                    text = rng.choice(CHAT)
                data = turn_group(sid, g, text, parent, base)
                uid = f"{sid[:8]}-u{g}"
                parent = uid + "a3"
                if rng.random() < split_share:
                    cut = rng.randrange(1, len(data))
                    chunks += [(rel, data[:cut]), (rel, data[cut:])]
                else:
                    chunks.append((rel, data))
            per_session.append(chunks)
    # Interleave the sessions, each keeping its own order.
    while any(per_session):
        pick = rng.choice([c for c in per_session if c])
        corpus.writes.append(pick.pop(0))
    return corpus


def append(home: Path, rel: str, data: bytes) -> None:
    """One agent append: a single O_APPEND write."""
    path = home / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- invariants


def memory_dirs(home: Path) -> dict[str, tuple[Path, str, str | None]]:
    """label → (directory, scope, key) for the drawer and every project's memory."""
    out: dict[str, tuple[Path, str, str | None]] = {"global": (home / "memory", "global", None)}
    projects = home / "projects"
    if projects.is_dir():
        for p in sorted(projects.iterdir()):
            if (p / "memory").is_dir():
                out[f"project:{p.name}"] = (p / "memory", "project", p.name)
    return out


def memory_names(home: Path) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for label, (d, scope, key) in memory_dirs(home).items():
        out[label] = {m.name for m in scan_dir(d, scope, key).memories}
    return out


def memory_files(home: Path) -> dict[str, set[str]]:
    """label → visible memory file names (what MEMORY.md must list)."""
    out: dict[str, set[str]] = {}
    for label, (d, _s, _k) in memory_dirs(home).items():
        out[label] = {p.name for p in d.glob("*.md") if p.name != INDEX_NAME and not p.name.startswith(".")} if d.is_dir() else set()
    return out


def index_problems(text: str, where: str) -> list[str]:
    """A MEMORY.md is whole: the header, `## Type` groups, index lines, a final newline."""
    if not text.endswith("\n"):
        return [f"{where}: does not end with a newline (cut short?)"]
    lines = text.split("\n")[:-1]
    if lines and lines[0].startswith("> ⚠ memd:"):
        lines = lines[1:]
    if not lines or lines[0] != INDEX_HEADER:
        return [f"{where}: does not start with the generated header"]
    end = next((i for i, ln in enumerate(lines) if ln.startswith(INDEX_END_PREFIX)), None)
    if end is None:
        return [f"{where}: no end marker after memd's block (cut short?)"]
    bad = [ln for ln in lines[1:end] if ln and not ln.startswith("## ") and not INDEX_LINE.match(ln)]
    return [f"{where}: malformed line {bad[0]!r}"] if bad else []


def index_targets(text: str) -> set[str]:
    return set(re.findall(r"^- \[.+?\]\(<?([^)>]+)>?\) — ", text, re.M))


def drawer_problems(text: str, where: str, end_marker: bool = True) -> list[str]:
    """The drawer render is whole: its title and header, and in the full form every
    entry's body up to the `[end FACT-…]` line its memory ends with."""
    if not text.endswith("\n"):
        return [f"{where}: does not end with a newline (cut short?)"]
    if not text.startswith(f"{DRAWER_TITLE}\n\n{DRAWER_HEADER}"):
        return [f"{where}: does not start with the drawer title and header"]
    if "injection budget, so only its index is shown" in text:
        lines = [ln for ln in text.split("\n")[:-1] if ln.startswith("- ")]
        bad = [ln for ln in lines if not (INDEX_LINE.match(ln) or ln.startswith("- … "))]
        return [f"{where}: malformed index line {bad[0]!r}"] if bad else []
    if not end_marker:
        return []
    entries = text.split("\n## ")[1:]
    cut = [e.split("\n", 1)[0] for e in entries if not END_OF_BODY.search(e.rstrip("\n"))]
    return [f"{where}: entry {cut[0]!r} is cut short"] if cut else []


def summary_problems(text: str, where: str) -> list[str]:
    if not text.startswith("# "):
        return [f"{where}: does not start with its title"]
    last = text.rstrip("\n").rsplit("\n", 1)[-1]
    if not text.endswith("-->\n") or not last.startswith(FOOTER_PREFIX):
        return [f"{where}: does not end with its footer (cut short?)"]
    return []


def view_problems(home: Path, *, end_marker: bool = True) -> list[str]:
    """Every file memd writes for agents is whole, and every memory parses with a unique name."""
    problems: list[str] = []
    for label, (d, scope, key) in memory_dirs(home).items():
        res = scan_dir(d, scope, key)
        problems += [f"{label}: {p}" for p in res.problems]
        for m in res.memories:
            if end_marker and not END_OF_BODY.search(m.body):
                problems.append(f"{m.path}: body cut short")
        names = [m.name.casefold() for m in res.memories]
        if len(names) != len(set(names)):
            problems.append(f"{label}: duplicate names {sorted(names)}")
        idx = d / INDEX_NAME
        if idx.exists():
            problems += index_problems(idx.read_text(encoding="utf-8"), str(idx))
    drawer = home / "memory.md"
    if drawer.exists():
        problems += drawer_problems(drawer.read_text(encoding="utf-8"), str(drawer), end_marker)
    for s in home.glob("projects/*/*/session-memory/summary.md"):
        problems += summary_problems(s.read_text(encoding="utf-8"), str(s))
    return problems


def temp_leftovers(home: Path) -> list[Path]:
    """Temporary files of atomic writes a kill left behind (hidden, ignored by readers)."""
    places = [home, home / "memory", *home.glob("projects/*/memory"), *home.glob("projects/*/*/session-memory")]
    return [p for d in places if d.is_dir() for p in d.glob(".*.tmp")]


def state_conn(home: Path) -> sqlite3.Connection | None:
    db = home / "memd" / "state.sqlite"
    if not db.exists():
        return None
    conn = sqlite3.connect(db, timeout=10, isolation_level=None)
    conn.row_factory = sqlite3.Row
    return conn


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,)).fetchone() is not None


def ledger_problems(home: Path, scratch: Path) -> list[str]:
    """The ledger's counts of every session equal an independent count of the bytes it read.

    The stored offset must sit on a line boundary; the counts must equal
    tests/reference.py's count of exactly the lines before it — so a span read
    twice (or skipped) after a crash shows as a difference.
    """

    conn = state_conn(home)
    if conn is None:
        return []
    problems: list[str] = []
    try:
        if not _has_table(conn, "sessions"):
            return []
        offsets = {r["path"]: r["offset"] for r in conn.execute("SELECT path, offset FROM files")}  # under the home
        for row in ledger.session_rows(conn):
            path = Path(row["path"])
            data = path.read_bytes()
            off = offsets.get(f"projects/{row['key']}/{path.name}", offsets.get(str(path), 0))
            if off > len(data) or (off and data[off - 1 : off] != b"\n"):
                problems.append(f"{path.name}: ledger offset {off} is not a line end of the file ({len(data)} bytes)")
                continue
            scratch.mkdir(parents=True, exist_ok=True)
            prefix = scratch / path.name
            prefix.write_bytes(data[:off])
            expect = claude_counts(prefix)
            got = {k: session_json(row)[k] for k in COMPARED}
            if got != expect:
                diff = {k: (got[k], expect[k]) for k in COMPARED if got[k] != expect[k]}
                problems.append(f"{path.name}: ledger counts differ from an independent count at offset {off}: {diff}")
    finally:
        conn.close()
    return problems


def unfinished_runs(home: Path, after_id: int = 0) -> list[dict[str, Any]]:
    conn = state_conn(home)
    if conn is None:
        return []
    try:
        if not _has_table(conn, "runs"):
            return []
        return [dict(r) for r in conn.execute(
            "SELECT id, job, target, started_at FROM runs WHERE finished_at IS NULL AND id > ?", (after_id,))]  # fmt: skip
    finally:
        conn.close()


def max_run_id(home: Path) -> int:
    conn = state_conn(home)
    if conn is None:
        return 0
    try:
        if not _has_table(conn, "runs"):
            return 0
        return int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM runs").fetchone()[0])
    finally:
        conn.close()


def runs_by_outcome(home: Path) -> dict[str, int]:
    conn = state_conn(home)
    if conn is None:
        return {}
    try:
        return {str(r[0]): int(r[1]) for r in conn.execute("SELECT COALESCE(outcome, 'killed'), count(*) FROM runs GROUP BY 1")}
    finally:
        conn.close()


def failed_runs(home: Path) -> list[dict[str, Any]]:
    conn = state_conn(home)
    if conn is None:
        return []
    try:
        return [dict(r) for r in conn.execute("SELECT job, target, reason FROM runs WHERE outcome='failed'")]
    finally:
        conn.close()


def search_files(home: Path) -> set[str] | None:
    db = home / "memd" / "search.sqlite"
    if not db.exists():
        return None

    conn = open_readonly(db)
    try:
        return {r[0] for r in conn.execute("SELECT file FROM memories")}
    except sqlite3.OperationalError:
        return None
    finally:
        conn.close()


def not_settled(home: Path, after_run_id: int = 0) -> str | None:
    """Why the daemon on `home` still has work, or None when it is idle and every view is current."""

    conn = state_conn(home)
    if conn is None:
        return "no state yet"
    try:
        if not _has_table(conn, "files"):
            return "no ledger yet"
        offsets = {r["path"]: r["offset"] for r in conn.execute("SELECT path, offset FROM files")}
        for t in home.glob("projects/*/*.jsonl"):
            if offsets.get(str(t.relative_to(home))) != t.stat().st_size:
                return f"{t.name} not fully read"
        ctx = JobContext(Home(home), st.load(home / "settings.json"), conn, lambda: datetime.now(UTC), None)
        for job in (extract, summary):
            due = job.due(ctx)
            if due:
                return f"{job.NAME} due for {due[0]}"
        left = conn.execute("SELECT job, target FROM runs WHERE finished_at IS NULL AND id > ?", (after_run_id,)).fetchone()
        if left is not None:
            return f"{left[0]} {left[1]} running"
    finally:
        conn.close()
    files = memory_files(home)
    for label, (d, _s, _k) in memory_dirs(home).items():
        idx = d / INDEX_NAME
        listed = index_targets(idx.read_text(encoding="utf-8")) if idx.exists() else set()
        if listed != files[label]:
            return f"{label}: MEMORY.md lists {sorted(listed ^ files[label])} wrongly"
    indexed = search_files(home)
    on_disk = {str(d.relative_to(home) / f) for label, (d, _s, _k) in memory_dirs(home).items() for f in files[label]}
    if indexed is None or indexed != on_disk:
        return "search index not current"
    drawer = home / "memory.md"
    drawer_text = drawer.read_text(encoding="utf-8") if drawer.exists() else ""
    for name in files["global"]:
        if f"memory/{name}" not in drawer_text:
            return f"drawer render lacks {name}"
    return None


def settle(home: Path, after_run_id: int = 0, timeout: float = 240.0) -> None:
    """Wait until `not_settled` is None twice in a row, a little apart (nothing started in between).

    Generous: on a loaded 2-core machine a `run-now` may wait minutes for the locks the daemon keeps
    taking; a run whose process died is closed by the daemon's sweep within its 30 s due-check.
    """
    last: list[str | None] = ["?"]

    def calm() -> bool:
        why = not_settled(home, after_run_id)
        last[0] = why
        if why is not None:
            return False
        time.sleep(0.3)
        why = not_settled(home, after_run_id)
        last[0] = why
        return why is None

    try:
        wait_for(calm, timeout, every=0.1)
    except AssertionError:
        raise AssertionError(f"{home} did not settle within {timeout}s: {last[0]}") from None


def ledger_state(home: Path) -> dict[str, dict[str, Any]]:
    """session id → the compared counts, as the ledger holds them."""

    conn = state_conn(home)
    assert conn is not None
    try:
        return {row["session_id"]: {k: session_json(row)[k] for k in COMPARED} for row in ledger.session_rows(conn)}
    finally:
        conn.close()


def walk(root: Path) -> Iterable[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            yield Path(dirpath) / n


def snapshot(root: Path, skip: Path | None = None) -> dict[str, tuple[int, bytes | None]]:
    """Every path under `root` (but `skip`) with its mode and, for files, contents."""
    out: dict[str, tuple[int, bytes | None]] = {}
    for p in walk(root):
        if skip is not None and (p == skip or skip in p.parents):
            continue
        st = p.lstat()
        data = p.read_bytes() if p.is_file() and not p.is_symlink() else (os.readlink(p).encode() if p.is_symlink() else None)
        out[str(p.relative_to(root))] = (st.st_mode, data)
    return out
