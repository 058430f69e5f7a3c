"""Extraction at the boundary with a real home (issues 11 and 16): the memory directory is the
canonical git root's, a rewritten transcript is judged only where it is new, and no memory lock
is held while a model answers."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest

from jobs import extract
from memd.job.runner import run_job
from memd.keys import cwd_key, project_key
from memd.locks import acquire
from memd.tree import Home, Place
from tests.fakeapi import FakeAnthropic, text
from tests.jobkit import context, ingest, make_settings
from tests.test_keys import git, make_repo

SID = "s1"
RULE = "We decided to use Postgres for the billing service."
RULE2 = "We decided to require two reviews for every database migration."


def session(home: Path, key: str, cwd: str, texts: list[str], mode: str = "w") -> Path:
    path = home / "projects" / key / f"{SID}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, mode) as fh:
        for i, t in enumerate(texts):
            fh.write(json.dumps({"type": "user", "uuid": f"u{i}-{len(t)}", "sessionId": SID, "cwd": cwd,
                                 "timestamp": f"2026-11-29T10:00:{i:02d}Z",
                                 "message": {"role": "user", "content": t}}) + "\n")  # fmt: skip
            fh.write(json.dumps({"type": "assistant", "uuid": f"a{i}-{len(t)}", "sessionId": SID, "cwd": cwd,
                                 "timestamp": f"2026-11-29T10:00:{i:02d}Z",
                                 "message": {"id": f"m{i}-{len(t)}", "role": "assistant",
                                             "content": [{"type": "text", "text": "Noted."}]}}) + "\n")  # fmt: skip
    return path


def offline() -> object:
    return make_settings(memd={"provider": "offline"})


def project_memories(home: Path, key: str) -> list[str]:
    d = home / "projects" / key / "memory"
    return sorted(p.name for p in d.glob("*.md") if p.name != "MEMORY.md") if d.is_dir() else []


def run_offline(home: Path, key: str) -> object:
    ctx = context(home, offline())  # type: ignore[arg-type]
    try:
        return run_job(ctx, extract, Place.session(key, SID))
    finally:
        ctx.conn.close()


def test_a_session_in_a_sub_directory_writes_to_the_repository_root(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / "src" / "deep").mkdir(parents=True)
    home = tmp_path / "home"
    key = cwd_key(repo / "src" / "deep")
    session(home, key, str(repo / "src" / "deep"), [RULE])
    ingest(home)
    r = run_offline(home, key)
    assert r.outcome == "ok", r  # type: ignore[attr-defined]
    root_key = project_key(repo / "src" / "deep")
    assert root_key != key and project_memories(home, root_key) and not project_memories(home, key)
    assert "Postgres" in (home / "projects" / root_key / "memory" / "MEMORY.md").read_text()


def test_a_worktree_session_writes_to_the_main_repository(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    git("worktree", "add", "-q", str(tmp_path / "wt"), "-b", "topic", cwd=repo)
    home = tmp_path / "home"
    key = cwd_key(tmp_path / "wt")
    session(home, key, str(tmp_path / "wt"), [RULE])
    ingest(home)
    run_offline(home, key)
    assert project_memories(home, project_key(repo)) and not project_memories(home, key)


def test_a_vanished_cwd_keeps_the_transcript_directory(tmp_path: Path) -> None:
    home = tmp_path / "home"
    key = "-gone-project"
    session(home, key, str(tmp_path / "no" / "longer" / "here"), [RULE])
    ingest(home)
    run_offline(home, key)
    assert project_memories(home, key)


def test_a_rewritten_transcript_is_judged_only_where_it_is_new(tmp_path: Path) -> None:
    home = tmp_path / "home"
    key = "-vanished-repo"
    path = session(home, key, "/nonexistent", [RULE])
    ingest(home)
    run_offline(home, key)
    first = project_memories(home, key)
    assert len(first) == 1
    # An editor rewrites the file: the old statement (with other bytes around it) and a new one.
    tmp = path.with_suffix(".tmp")
    shutil.copy(path, tmp)
    session(home, key, "/nonexistent", ["(edited) " + RULE2], mode="a")
    path.rename(tmp.with_suffix(".old"))
    tmp.rename(path)
    session(home, key, "/nonexistent", [RULE2], mode="a")
    data = path.read_bytes().replace(b"Noted.", b"Noted!")
    path.write_bytes(data)  # bytes before the cursor changed: a rewrite, not an append
    results = ingest(home)
    assert any(r.reset for r in results)
    r = run_offline(home, key)
    assert r.outcome == "ok"  # type: ignore[attr-defined]
    after = project_memories(home, key)
    assert len(after) == 2 and set(first) <= set(after)  # the old statement is not made twice
    assert run_offline(home, key).outcome == "skipped"  # type: ignore[attr-defined]


@pytest.mark.slow
def test_no_memory_lock_is_held_while_the_model_answers(tmp_path: Path) -> None:
    home = tmp_path / "home"
    key = "-slow-model"
    session(home, key, "/nonexistent", [RULE])
    ingest(home)
    answer = threading.Event()  # the gate's answer waits for the test, not for a fixed 3 s a loaded machine may outlast

    def gated(_body: object) -> object:
        answer.wait(120)
        return text("no")

    with FakeAnthropic(responder=gated) as api:
        out: list[object] = []

        def work() -> None:
            ctx = context(home, make_settings(), fake_url=api.base_url)
            out.append(run_job(ctx, extract, Place.session(key, SID)))
            ctx.conn.close()

        t = threading.Thread(target=work)
        t.start()
        deadline = time.monotonic() + 120
        while not api.message_requests and time.monotonic() < deadline:
            time.sleep(0.02)
        assert api.message_requests, "the gate call never arrived"
        try:
            with acquire(Home(home), [Place.global_(), Place.project(key)], timeout=0.5):
                pass  # taken at once while the gate call is in flight
        finally:
            answer.set()
        t.join(120)
        assert out and out[0].outcome == "ok"  # type: ignore[attr-defined]
        assert len(api.message_requests) == 1
