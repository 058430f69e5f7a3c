"""The index check's packed stats (`memd.index.fingerprint._entries`) are the bytes records version 3 were made
from: packed with `struct` now, with `array("q")` when those records were written, so a record left by an
earlier memd still vouches for an unchanged directory (no check after an upgrade reads every file again)."""

from __future__ import annotations

import os
import struct
from array import array
from itertools import chain
from pathlib import Path

import pytest

from memd.index import fingerprint
from memd.memory.file import render_memory


def test_the_packed_stats_are_the_bytes_records_version_3_hold(tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / f"m{i}.md").write_text(render_memory(f"m{i}", "d", "user", "b" * i))
    (tmp_path / "sub.md").mkdir()  # a directory named like a memory: left out
    names = sorted(["m0.md", "m1.md", "m2.md", "m3.md", "m4.md"])
    stats = [os.lstat(tmp_path / n) for n in names]
    fields = chain.from_iterable((st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns) for st in stats)
    want = f"{len(names)}\0".encode() + "\0".join(names).encode() + b"\0" + array("q", fields).tobytes()
    assert fingerprint._entries(tmp_path) == want
    assert fingerprint.RECORD_VERSION == 3


def test_an_inode_past_2_63_raises_what_the_text_fallback_catches() -> None:
    with pytest.raises(struct.error):
        fingerprint._PACK_SIG(0o100644, 2**63, 1, 1)
    assert fingerprint._PACK_SIG(0o100644, 2**63 - 1, -1, -(2**63)) == array("q", [0o100644, 2**63 - 1, -1, -(2**63)]).tobytes()


def test_a_directory_with_an_inode_past_2_63_is_digested_from_the_fields_as_text(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Some file systems give inode numbers past a signed 64-bit integer: the check still digests the directory
    (the fields as text), and a change to such a file still changes the digest."""
    for name in ("a.md", "b.md"):
        (tmp_path / name).write_text(render_memory(name[0], "d", "user", "b"))
    real = os.lstat

    def huge(path: str, *, dir_fd: int | None = None) -> os.stat_result:
        st = real(path, dir_fd=dir_fd)
        fields = list(st)
        fields[1] = 2**64 - 1 if path == "b.md" else st.st_ino  # st_ino
        return os.stat_result(fields, {"st_mtime_ns": st.st_mtime_ns})

    monkeypatch.setattr(os, "lstat", huge)
    first = fingerprint._entries(tmp_path)
    assert first is not None and first.endswith(b"]") and str(2**64 - 1).encode() in first
    os.utime(tmp_path / "b.md", ns=(1, 1))
    assert fingerprint._entries(tmp_path) not in (None, first)
