"""Issue 27 point 2: the daemon's watcher asks the kernel for writes only. Without a filter, inotify
reported every open and read-only close in the watched tree (memd's own read of each append, each
file of every scan), each carried through watchdog's threads only to be dropped. Checked on the real
daemon process through the kernel's own record of its watches (/proc/<pid>/fdinfo)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.procs import DaemonProc, wait_for

IN_ACCESS, IN_MODIFY, IN_CLOSE_WRITE, IN_CLOSE_NOWRITE, IN_OPEN = 0x1, 0x2, 0x8, 0x10, 0x20


def _inotify_masks(pid: int) -> list[int]:
    """The event mask of every inotify watch the process holds."""
    masks = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:inotify":
                continue
            info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:  # closed meanwhile
            continue
        for line in info.splitlines():
            if line.startswith("inotify wd:"):
                field = next(f for f in line.split() if f.startswith("mask:"))
                masks.append(int(field.removeprefix("mask:"), 16))
    return masks


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify watches are Linux's")
def test_the_watcher_asks_the_kernel_for_writes_only(tmp_path: Path) -> None:
    home = tmp_path / "h"
    (home / "projects" / "-k").mkdir(parents=True)
    (home / "projects" / "-k" / "s1.jsonl").write_text("")
    with DaemonProc(home) as d:
        assert d.proc is not None
        pid = d.proc.pid
        # projects/, projects/-k/ and memory/: every watch carries the mask it was added with.
        wait_for(lambda: len(_inotify_masks(pid)) >= 3)
        masks = _inotify_masks(pid)
        assert all(m & (IN_OPEN | IN_CLOSE_NOWRITE | IN_ACCESS) == 0 for m in masks), [hex(m) for m in masks]
        assert all(m & IN_MODIFY and m & IN_CLOSE_WRITE for m in masks), [hex(m) for m in masks]
        assert d.stop() == 0
