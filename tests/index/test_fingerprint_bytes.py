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
