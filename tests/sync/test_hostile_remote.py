"""A remote (or a tar) someone else controls: nothing unvetted reaches live memory (issue 23)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
from pathlib import Path

import pytest

from memd.sync import run as sync
from memd.tree import Home
from tests.procs import memd_env, run_memd
from tests.sync.helpers import GIT_ENV, bare_remote, git, make_home, memd_write, memory_files, settings_of, text

SECRET = "ANTHROPIC_API_KEY=sk-ant-api03-" + "Qw7" * 30
BIG = 3 * 1024 * 1024  # over the 1 MB cap; the mechanism (size asked before any read) is the same at 200 MB


def push_as_attacker(remote: Path, tmp: Path, files: dict[str, bytes], *, links: dict[str, str] | None = None,
                     gitlinks: tuple[str, ...] = (), delete: tuple[str, ...] = ()) -> None:  # fmt: skip
    """A plain git client pushes whatever it likes to the shared remote."""
    work = tmp / "attacker"
    if not work.exists():
        git("clone", "-q", str(remote), str(work))
    else:
        git("-C", str(work), "pull", "-q", "--ff-only")
    for path, data in files.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_bytes(data)
        git("-C", str(work), "add", path)
    for path, target in (links or {}).items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, work / path)
        git("-C", str(work), "add", path)
    for path in gitlinks:
        git("-C", str(work), "update-index", "--add", "--cacheinfo", f"160000,{'ab' * 20},{path}")
    for path in delete:
        git("-C", str(work), "rm", "-q", path)
    git("-C", str(work), "commit", "-q", "-m", "from elsewhere")
    git("-C", str(work), "push", "-q", "origin", "HEAD:main")


def in_sync(home: Home, host: str, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setenv("MEMD_HOST", host)
    return sync.run(home, settings_of(home))


def _everything_but_quarantine(home: Home) -> bytes:
    out = b""
    for p in home.root.rglob("*"):
        rel = p.relative_to(home.root).parts
        if p.is_file() and not p.is_symlink() and rel[:2] not in (("memd", "quarantine"), ("memd", "git")):
            out += p.read_bytes()
    return out


def test_incoming_files_that_fail_a_write_s_checks_are_kept_aside_and_status_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    remote = bare_remote(tmp_path)
    a, b = make_home(tmp_path, "a", remote), make_home(tmp_path, "b", remote)
    memd_write(a, None, "clean.md", text("clean", "Nothing to hide."))
    in_sync(a, "laptop", monkeypatch)
    push_as_attacker(remote, tmp_path, {
        "global/token.md": text("token", f"prod: {SECRET}").encode(),
        "global/nofm.md": b"no front matter here\n",
        "global/bin.md": b"---\nname: x\n\0\xff\xfe binary",
        "global/big.md": text("big", "x" * BIG).encode(),
        "global/ok.md": text("ok", "A fine memory.").encode(),
        "global/hidden.md": text("keep\u200bme", "Looks like keep me.").encode(),
    }, links={"global/link.md": "/etc/passwd"}, gitlinks=("global/sub.md",))  # fmt: skip
    got = in_sync(b, "desk", monkeypatch)  # a gitlink on the remote never fails the sync
    assert set(memory_files(b, None)) == {"clean.md", "ok.md"}
    assert sorted(got["skipped"]) == ["global/link.md", "global/sub.md"]
    q = b.memd_dir / "quarantine"
    assert (q / "global" / "token.md").read_bytes() == text("token", f"prod: {SECRET}").encode()
    assert {p.name for p in (q / "global").iterdir()} == {"token.md", "nofm.md", "bin.md", "hidden.md"}
    log = [json.loads(line) for line in (q / "log.jsonl").read_text().splitlines()]
    assert {e["file"]: bool(e["kept"]) for e in log} == {"token.md": True, "nofm.md": True, "bin.md": True,
                                                         "hidden.md": True, "big.md": False}  # fmt: skip
    assert "secret" in next(e["reason"] for e in log if e["file"] == "token.md")
    assert "sk-ant-api03" not in _everything_but_quarantine(b).decode("utf-8", "replace")  # index, search, history
    r = run_memd(b.root, "status", env=memd_env(**GIT_ENV))
    assert "quarantined: 5 incoming file(s) kept aside" in r.stdout and str(q) in r.stdout
    assert "not committed" not in r.stdout  # they are the remote's, not a local refusal
    # the next syncs leave the remote's files alone (absence here is no deletion) and keep nothing else aside
    in_sync(b, "desk", monkeypatch)
    in_sync(a, "laptop", monkeypatch)
    tree = git("--git-dir", str(remote), "ls-tree", "-r", "--name-only", "main").split()
    assert {"global/token.md", "global/nofm.md", "global/sub.md", "global/ok.md"} <= set(tree)
    assert len((q / "log.jsonl").read_text().splitlines()) == 5


def test_a_remote_commit_deleting_every_memory_of_a_scope_is_held(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    remote = bare_remote(tmp_path)
    a = make_home(tmp_path, "a", remote)
    for n in ("one", "two", "three"):
        memd_write(a, None, f"{n}.md", text(n, f"{n} body"))
    in_sync(a, "laptop", monkeypatch)
    push_as_attacker(remote, tmp_path, {}, delete=("global/one.md", "global/two.md", "global/three.md"))
    got = in_sync(a, "laptop", monkeypatch)
    assert set(memory_files(a, None)) == {"one.md", "two.md", "three.md"}
    held = [c for c in got["conflicts"] if c["kind"] == "deletions-held"]
    assert len(held) == 1 and "all 3 memories" in held[0]["note"]
    # our tree kept them, so they went back to the remote
    assert "global/one.md" in git("--git-dir", str(remote), "ls-tree", "-r", "--name-only", "main")
    # one deletion is an ordinary forget and goes through
    push_as_attacker(remote, tmp_path, {}, delete=("global/one.md",))
    in_sync(a, "laptop", monkeypatch)
    assert set(memory_files(a, None)) == {"two.md", "three.md"}


def test_a_git_remote_that_accepts_and_never_answers_is_given_up_when_idle(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A loopback listener that accepts and sends nothing: the fetch is given up after the idle bound
    (here 2 s instead of 30 s), not after the 300 s overall one; the git lock is free again."""

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    held: list[socket.socket] = []

    def accept_and_say_nothing() -> None:
        with contextlib.suppress(OSError):
            while True:
                held.append(srv.accept()[0])

    threading.Thread(target=accept_and_say_nothing, daemon=True).start()
    a = make_home(tmp_path, "a", f"git://127.0.0.1:{srv.getsockname()[1]}/memory.git")
    memd_write(a, None, "one.md", text("one", "1"))
    monkeypatch.setattr(sync, "NETWORK_IDLE_SECONDS", 2.0, raising=False)
    try:
        with pytest.raises(sync.SyncError, match="no answer for 2 s"):
            in_sync(a, "laptop", monkeypatch)
    finally:
        srv.close()
        for c in held:
            c.close()
    assert held  # it did connect: the bound is the idle one
    st = sync.status(a, settings_of(a))
    assert "unreachable" in st["last_error"] and st["ahead"] == 1
