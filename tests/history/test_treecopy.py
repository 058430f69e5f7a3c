"""The scope copy of an undo's staging: byte-exact, and made durable by one file-system sync, not one fsync a file."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from memd.history import treecopy


def _scope(home: Path, n: int) -> Path:
    d = home / "projects" / "-p" / "memory"
    d.mkdir(parents=True)
    for i in range(n):
        (d / f"m{i:03d}.md").write_text(f"---\nname: m{i}\n---\nbody {i}\n" * (i % 7 + 1))
        os.utime(d / f"m{i:03d}.md", (1.7e9 + i, 1.7e9 + i))
    (d / "sub").mkdir()
    (d / "sub" / "x.md").write_text("x")
    return d


def _count_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return calls


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="syncfs is Linux's")
def test_a_whole_scope_copy_syncs_its_file_system_once_not_every_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The staging copy of an undo (a snapshot is one pack now: tests/history/test_pack.py)."""
    live = _scope(tmp_path, 300)
    copied = treecopy.copy_tree(live, tmp_path / "copy", link=False)
    calls = _count_fsyncs(monkeypatch)
    treecopy.durable(copied)
    assert len(calls) == 0, len(calls)  # one syncfs, not 301 fsyncs
    for p in live.rglob("*"):
        q = tmp_path / "copy" / p.relative_to(live)
        assert q.is_dir() if p.is_dir() else q.read_bytes() == p.read_bytes()
        if p.is_file():
            assert q.stat().st_mtime_ns == p.stat().st_mtime_ns


def test_a_few_files_are_fsynced_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    live = _scope(tmp_path, 3)
    copied = treecopy.copy_tree(live, tmp_path / "copy", link=False)
    calls = _count_fsyncs(monkeypatch)
    treecopy.durable(copied)
    assert len(calls) == len(copied.files) + len(copied.dirs) == 4 + 2


def test_without_syncfs_every_file_is_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the one-call sync is missing (or fails), the copy falls back to the batch of fsyncs."""
    live = _scope(tmp_path, 40)
    copied = treecopy.copy_tree(live, tmp_path / "copy", link=False)
    monkeypatch.setattr(treecopy, "_syncfs", lambda: None)
    calls = _count_fsyncs(monkeypatch)
    treecopy.durable(copied)
    assert len(calls) == 41 + 2
