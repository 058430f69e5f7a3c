"""Packed snapshots (issue 27): one file a run, one fsync; undo restores them byte-exact, still
undoes runs of the older `files/` layout, refuses a damaged pack, and a kill -9 while a scope is
packed or restored leaves the old state or a complete run."""

from __future__ import annotations

import json
import os
import random
import signal
import stat
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

import jobs.dream as dream
from memd.history import kept, runs, store, treecopy
from memd.history import snapshots as swap
from memd.history.pack import PACK_FILE, Pack
from memd.job.runner import run_job
from memd.tree import Home, Place
from tests.conftest import REPO
from tests.jobs.dream.helpers import KEY, TARGET, make_ctx, mk_settings, offline_scope
from tests.procs import kill_rounds

REF = Place("project", KEY)
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _tree(d: Path) -> dict[str, Any]:
    """Everything a byte-exact copy keeps, by relative path: bytes, mode and mtime; links' targets."""
    out: dict[str, Any] = {".": (stat.S_IMODE(d.stat().st_mode), d.stat().st_mtime_ns)}
    for p in sorted(d.rglob("*")):
        st = p.lstat()
        rel = p.relative_to(d).as_posix()
        if p.is_symlink():
            out[rel] = ("link", os.readlink(p))
        elif p.is_dir():
            out[rel] = ("dir", stat.S_IMODE(st.st_mode), st.st_mtime_ns)
        else:
            out[rel] = (p.read_bytes(), stat.S_IMODE(st.st_mode), st.st_mtime_ns)
    return out


def _odd_scope(home: Path) -> Path:
    """The dream's scope plus what a user may keep beside memories: a sub-directory, a link, odd modes."""
    d = offline_scope(home)
    (d / "notes").mkdir()
    (d / "notes" / "todo.txt").write_bytes(b"\xff\xfe not utf-8\n")
    os.utime(d / "notes" / "todo.txt", ns=(1_700_000_000_123_456_789, 1_700_000_000_123_456_789))
    os.utime(d / "notes", ns=(1_700_000_100_000_000_001, 1_700_000_100_000_000_001))
    (d / "link.md").symlink_to("tabs.md")
    os.chmod(d / "freeze.md", 0o640)
    return d


def _dream(home: Path) -> dict[str, Any]:
    r = run_job(make_ctx(home, mk_settings(), now=NOW), dream, TARGET, force=True)
    assert r.outcome == "ok" and r.details.get("run"), r
    [run] = [x for x in runs.list_runs(Home(home), REF) if x["run"] == r.details["run"]]
    return run


def test_a_snapshot_is_one_packed_file_made_durable_by_one_fsync(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No per-file copy and no per-file (or file-system-wide) flush: the pack, its entry and the
    history root, each fsynced once."""
    d = _odd_scope(home)
    before = _tree(d)
    fsyncs: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd))[1])
    monkeypatch.setattr(treecopy, "_syncfs", lambda: pytest.fail("a snapshot needs no syncfs"))
    entry = swap.snapshot(Home(home), REF, "20260101T000000Z-aaaaaa")
    assert sorted(os.listdir(entry)) == [PACK_FILE] and len(fsyncs) <= 3, (os.listdir(entry), fsyncs)
    assert _tree(d) == before  # the live directory is only read
    pack = Pack.open(entry / PACK_FILE)
    assert {e["path"] for e in pack.entries} == set(before) - {"."}
    for e, data in pack.all_files():
        assert (data, e["mode"], e["mtime_ns"]) == before[e["path"]]
    assert kept.listing(entry) == {k: (stat.S_IFLNK, 0, 0) if v[0] == "link" else (stat.S_IFDIR, 0, 0) if v[0] == "dir"
                                   else (stat.S_IFREG, len(v[0]), v[2]) for k, v in before.items() if k != "."}  # fmt: skip


def test_a_dreams_snapshot_is_packed_and_undo_restores_it_byte_exact(home: Path) -> None:
    d = _odd_scope(home)
    before = _tree(d)
    run = _dream(home)
    entry = Path(run["path"])
    assert (entry / PACK_FILE).is_file() and not (entry / store.FILES_DIR).exists()
    assert set(run["snapshot_sha256"]) == {k for k, v in before.items() if k != "." and v[0] not in ("dir", "link")}
    assert _tree(d) != before
    info = runs.undo(Home(home), mk_settings(), REF, run["run"], now=NOW, lock_timeout=5)
    after = _tree(d)  # MEMORY.md is derived (the refresh writes it), so the root's mtime moves with it
    assert {k: v for k, v in after.items() if k not in ("MEMORY.md", ".")} == {k: v for k, v in before.items() if k != "."}
    assert after["."][0] == before["."][0]
    assert info["kind"] == "undo" and info["changes"]["brought_back"]  # the dream's deletions came back
    undo_entry = store.history_root(Home(home), REF) / info["run"]
    assert (undo_entry / PACK_FILE).is_file()  # the undo's own snapshot is packed too: it can be undone
    runs.undo(Home(home), mk_settings(), REF, info["run"], now=NOW, lock_timeout=5)
    assert kept.top_files(undo_entry, lambda n: n.endswith(".md") and n != "MEMORY.md") == {
        p.name: p.read_bytes() for p in d.glob("*.md") if p.name != "MEMORY.md" and not p.is_symlink()}  # fmt: skip


def _old_layout_run(home: Path, d: Path, run_id: str) -> Path:
    """A dream's history entry as memd wrote it before packs: `files/` copied per file, modes.json, sha256.json."""
    entry = store.history_root(Home(home), REF) / run_id
    entry.mkdir(parents=True)
    modes: dict[str, int] = {}
    sums: dict[str, str] = {}
    treecopy.copy_tree(d, entry / store.FILES_DIR, link=False, modes=modes, sums=sums)
    (entry / swap.MODES_FILE).write_text(json.dumps(modes))
    (entry / store.SUMS_FILE).write_text(json.dumps(sums))
    store.write_run_info(entry, {"run": run_id, "scope": str(REF), "kind": "dream", "time": "2026-01-01T00:00:00Z",
                                 "provider": "offline", "changes": {}})  # fmt: skip
    return entry


def test_a_run_of_the_older_files_layout_still_undoes_and_reads(home: Path) -> None:
    d = _odd_scope(home)
    before = _tree(d)
    entry = _old_layout_run(home, d, "20260101T000000Z-bbbbbb")
    (d / "tabs.md").write_text("edited since\n")
    (d / "board.md").unlink()
    assert kept.read_file(entry, "board.md") == (before["board.md"][0], before["board.md"][2])  # `memd why`, the views
    runs.undo(Home(home), mk_settings(), REF, "20260101T000000Z-bbbbbb", now=NOW, lock_timeout=5)
    after = _tree(d)
    assert {k: v for k, v in after.items() if k not in ("MEMORY.md", ".")} == {k: v for k, v in before.items() if k != "."}
    assert after["."][0] == before["."][0]


def test_undo_refuses_a_damaged_pack_and_restores_nothing(home: Path) -> None:
    d = offline_scope(home)
    run = _dream(home)
    pack = Path(run["path"]) / PACK_FILE
    live = _tree(d)
    member = next(e for e in Pack.open(pack).files() if e["path"] == "tabs.md")
    data = bytearray(pack.read_bytes())
    data[member["offset"]] ^= 0x20  # one byte of one memory
    pack.write_bytes(bytes(data))
    with pytest.raises(runs.HistoryError, match=r"\(tabs.md changed\); nothing restored"):
        runs.undo(Home(home), mk_settings(), REF, run["run"], now=NOW, lock_timeout=5)
    pack.write_bytes(bytes(data[: len(data) // 2]))  # cut short
    with pytest.raises(runs.HistoryError, match="not a whole snapshot pack"):
        runs.undo(Home(home), mk_settings(), REF, run["run"], now=NOW, lock_timeout=5)
    assert _tree(d) == live and [r["kind"] for r in runs.list_runs(Home(home), REF)] == ["dream"]


CHILD = r"""
import logging, sys
import structlog
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
from datetime import UTC, datetime
from pathlib import Path
from memd.history import runs
from memd.settings import parse_text
from memd.tree import Home, Place
print("go", flush=True)
runs.undo(Home(Path(sys.argv[1])), parse_text("{}"), Place("project", sys.argv[2]), sys.argv[3],
          now=datetime.now(UTC), lock_timeout=10)
print("done", flush=True)
"""


def test_kill_9_while_an_undo_packs_and_restores_leaves_old_or_a_whole_run(home: Path) -> None:
    """An undo packs the present, writes the kept pack out and swaps it in; killed anywhere, recovery
    leaves the scope as it was (no undo run) or undone (and that run's pack whole and undoable)."""
    d = offline_scope(home)
    for i in range(200):  # enough files that a kill lands inside the pack's write and the restore
        (d / f"bulk-{i:03d}.md").write_text(f"---\nname: bulk {i}\ndescription: d\ntype: project\n---\nbody {i}\n" * 4)
    run = _dream(home)
    dreamt = {p.name: p.read_bytes() for p in d.glob("*.md") if p.name != "MEMORY.md"}
    pristine = home.parent / "pristine"
    subprocess.run(["cp", "-a", str(home), str(pristine)], check=True)
    runs.undo(Home(home), mk_settings(), REF, run["run"], now=NOW, lock_timeout=5)  # what "undone" looks like
    undone = {q.name: q.read_bytes() for q in d.glob("*.md") if q.name != "MEMORY.md"}
    rng = random.Random(5)
    seen = {"old": 0, "new": 0}
    for _ in range(kill_rounds(2)):
        subprocess.run(["rm", "-rf", str(home)], check=True)
        subprocess.run(["cp", "-a", str(pristine), str(home)], check=True)
        p = subprocess.Popen([sys.executable, "-c", CHILD, str(home), KEY, run["run"]], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=REPO)  # fmt: skip
        assert p.stdout is not None and p.stdout.readline().strip() == "go"
        time.sleep(rng.uniform(0.05, 0.3))
        p.send_signal(signal.SIGKILL)
        p.communicate(timeout=30)
        swap.recover(Home(home), lock_timeout=5)
        now_files = {q.name: q.read_bytes() for q in d.glob("*.md") if q.name != "MEMORY.md"}
        assert now_files in (dreamt, undone)
        history = runs.list_runs(Home(home), REF)
        if now_files == dreamt:
            seen["old"] += 1
            assert [r["kind"] for r in history] == ["dream"]
        else:
            seen["new"] += 1
            assert [r["kind"] for r in history] == ["dream", "undo"]
            assert runs.verify_snapshot(Path(history[1]["path"]), history[1]) is None
            assert kept.top_files(Path(history[1]["path"]), lambda n: n.endswith(".md") and n != "MEMORY.md") == dreamt
        assert not list(d.parent.glob(".memory*")) and not list(Path(run["path"]).parent.glob("*/.files.pack.tmp"))
    assert undone != dreamt
    print(seen)


def test_run_json_holds_the_sums_of_the_pack_and_of_the_bytes_before(home: Path) -> None:
    """The dream passes the sums it computed while packing to run.json (the pack is not read back):
    they are the manifest's, and the sha256 of each file as it was before the run."""
    import hashlib  # noqa: PLC0415 - only this test

    d = offline_scope(home)
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in d.iterdir() if p.is_file()}
    assert run_job(make_ctx(home, mk_settings()), dream, TARGET, force=True).outcome == "ok"
    [entry] = [e for e in store.history_root(Home(home), REF).iterdir() if e.is_dir()]
    sums = json.loads((entry / store.RUN_FILE).read_text())["snapshot_sha256"]
    assert sums == {e["path"]: e["sha256"] for e in Pack.open(entry / PACK_FILE).files()} == before


@hsettings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=12), st.text(max_size=12), max_size=6),
       st.dictionaries(st.sampled_from(["seq", "run", "changes", "z", "snapshot_sha256x"]),
                       st.recursive(st.none() | st.integers() | st.text(max_size=8),
                                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                                    max_leaves=8), max_size=4))  # fmt: skip
def test_run_json_is_json_dumps_with_an_indent_byte_for_byte(sums: dict[str, str], rest: dict[str, Any]) -> None:
    """run.json's sums are joined by hand (the indented encoder is Python): the same text as
    `json.dumps(indent=1, ensure_ascii=False)`, for any file names and any other fields, nested ones
    named like the sums included."""
    for data in ({**rest, "snapshot_sha256": sums}, {"snapshot_sha256": sums, **rest},
                 {**rest, "changes": {"snapshot_sha256": {}}, "snapshot_sha256": sums}, rest):  # fmt: skip
        assert store.run_json(data) == json.dumps(data, indent=1, ensure_ascii=False)


def _manifest_bytes(pack_file: Path) -> bytes:
    data = pack_file.read_bytes()
    at, length = int.from_bytes(data[-56:-48], "big"), int.from_bytes(data[-48:-40], "big")
    return data[at : at + length]


def test_the_manifest_is_orjson_s_and_a_name_it_refuses_falls_back_to_json(home: Path) -> None:
    """The manifest is written by orjson (UTF-8 names as they are, not json's `\\u` escapes); a file
    name that is not valid UTF-8 (kept by surrogate escapes, which orjson refuses) goes through json.
    Either pack reads back whole, every member by its sum."""
    d = offline_scope(home)
    (d / "café.md").write_bytes(b"---\nname: cafe\n---\n")
    entry = swap.snapshot(Home(home), REF, "20260101T000000Z-cccccc")
    manifest = _manifest_bytes(entry / PACK_FILE)
    assert "café.md".encode() in manifest and b"\\u00e9" not in manifest
    assert {e["path"] for e, _data in Pack.open(entry / PACK_FILE).all_files()} >= {"café.md"}
    odd = os.fsencode(str(d)) + b"/\xff-odd.md"
    with open(odd, "wb") as fh:
        fh.write(b"bytes\n")
    entry = swap.snapshot(Home(home), REF, "20260101T000000Z-dddddd")
    manifest = _manifest_bytes(entry / PACK_FILE)
    assert b"\\udcff-odd.md" in manifest and b"\\u00e9" in manifest  # json's escapes, the whole manifest
    files = dict((e["path"], data) for e, data in Pack.open(entry / PACK_FILE).all_files())
    assert files[os.fsdecode(b"\xff-odd.md")] == b"bytes\n"


def test_a_dreams_pack_takes_the_top_level_from_the_check_under_the_lock(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The offline dream packs its snapshot right after checking, under the scope's lock, that the
    directory is as planned: the pack takes that check's listing and lstats instead of listing and
    stating the directory again (a sub-directory is still walked), and holds the same entries."""
    from memd.history import pack as packmod  # noqa: PLC0415

    d = _odd_scope(home)
    before = _tree(d)
    listed: list[Path] = []

    class _Os:
        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

        def scandir(self, path: Any) -> Any:
            listed.append(Path(path))
            return os.scandir(path)

    monkeypatch.setattr(packmod, "os", _Os())
    run = _dream(home)
    assert d not in listed and d / "notes" in listed, listed
    monkeypatch.undo()
    packed = Pack.open(Path(run["path"]) / PACK_FILE)
    assert [e["path"] for e in packed.entries] == sorted(set(before) - {"."})  # walk order: a directory first
    for e, data in packed.all_files():
        assert (data, e["mode"], e["mtime_ns"]) == before[e["path"]]
    runs.undo(Home(home), mk_settings(), REF, run["run"], now=NOW, lock_timeout=5)
    after = _tree(d)
    assert {k: v for k, v in after.items() if k not in ("MEMORY.md", ".")} == {k: v for k, v in before.items() if k != "."}
