"""`memd list` and the index check's stats run with the cyclic collector paused (issue 27 point 4,
i27l3): a stat, a row and a JSON object a memory, no cycle among them. The objects are gone when
the pause ends (else the first pass after walks them all), and the collector is on again after."""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from memd.index.refresh import refresh_dir
from memd.memory.file import render_memory
from memd.tree import Home
from tests.procs import invoke

N = 300  # each leaves 3+ tracked objects alive when they outlive the pause: far more than N


def _scope(tmp_path: Path) -> Home:
    home = Home(tmp_path / "h")
    d = home.project_memory("-p")
    d.mkdir(parents=True)
    for i in range(N):
        (d / f"m{i:03d}.md").write_text(render_memory(f"m{i:03d}", f"memory {i}", "user", f"body {i}"))
    refresh_dir(home, "project", "-p", d)
    return home


def _watched(real: Any, left: list[int]) -> Any:
    """`real` (a `paused`), noting how many more young objects the collector counts as each pause
    ends than as it began (allocated and not freed within it)."""

    @contextmanager
    def watched() -> Iterator[None]:
        with real():
            start = gc.get_count()[0]
            yield
            left.append(gc.get_count()[0] - start)

    return watched


def test_list_is_made_with_the_collector_paused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import memd.collector as collector  # noqa: PLC0415 - patched below
    import memd.index.listing as listing  # noqa: PLC0415 - patched below

    home = _scope(tmp_path)
    args = ["--home", str(home.root), "list", "--all", "--json"]
    assert invoke(args).returncode == 0  # its modules imported first (they stay, rightly)
    seen: list[bool] = []
    real_list_dir = listing.list_dir

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return real_list_dir(*args, **kwargs)

    left: list[int] = []
    monkeypatch.setattr(listing, "list_dir", spy)
    monkeypatch.setattr(collector, "paused", _watched(collector.paused, left))
    assert gc.isenabled()
    r = invoke(args)
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["memories"]) == N
    assert seen and not any(seen) and gc.isenabled()  # the drawer and the project
    assert len(left) == 1 and left[0] < 2 * N  # freed within the pause (else 3+ a memory; slack for other threads)


def test_the_index_checks_stats_are_taken_with_the_collector_paused(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    import memd.index.fingerprint as fingerprint  # noqa: PLC0415 - patched below

    home = _scope(tmp_path)
    d = home.project_memory("-p")
    before = fingerprint._entries(d)
    seen: list[bool] = []
    real_lstat = os.lstat

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return real_lstat(*args, **kwargs)

    left: list[int] = []
    monkeypatch.setattr(fingerprint.os, "lstat", spy)
    monkeypatch.setattr(fingerprint, "paused", _watched(fingerprint.paused, left))
    assert fingerprint._entries(d) == before
    assert len(seen) == N and not any(seen) and gc.isenabled()
    assert len(left) == 1 and left[0] < N  # the stats freed within the pause
