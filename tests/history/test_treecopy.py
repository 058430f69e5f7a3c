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


def test_the_scans_stats_are_the_directorys_signature(tmp_path: Path) -> None:
    """The dream takes its signature from the scan's own stat of each entry (`scan_dir(stats=…)`):
    the same signature a separate pass takes, for memories, a file that does not parse, MEMORY.md,
    a sub-directory, a symlink and a file that is not a memory; and any later edit shows."""
    from memd.memory.scan import scan_dir  # noqa: PLC0415 - only this test

    d = _scope(tmp_path, 5)
    (d / "MEMORY.md").write_text("# index\n")
    (d / "broken.md").write_text("---\nname: [\n---\n")
    (d / "notes.txt").write_text("not a memory")
    (d / "link.md").symlink_to(d / "m001.md")
    stats: dict[str, os.stat_result] = {}
    scan_dir(d, "project", "-p", stats=stats)
    sig = treecopy.signature_of(stats)
    assert sig == treecopy.signature(d)
    assert {"MEMORY.md", "broken.md", "notes.txt", "link.md", "sub", "m000.md"} <= set(sig)
    (d / "m002.md").write_text("---\nname: m2\n---\nedited\n")
    assert treecopy.signature(d) != sig


def test_the_swapped_out_copy_is_removed_whole_and_no_link_is_followed(tmp_path: Path) -> None:
    """`remove_old` (the old directory after a swap) removes files, a sub-directory and links,
    and leaves what a link points to, like `shutil.rmtree`."""
    from memd.history.snapshots import remove_old  # noqa: PLC0415 - only this test

    d = _scope(tmp_path, 30)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.md").write_text("kept")
    (d / "link.md").symlink_to(outside / "keep.md")
    (d / "dirlink").symlink_to(outside)
    remove_old(d)
    assert not d.exists() and (outside / "keep.md").read_text() == "kept"
