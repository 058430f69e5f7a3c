"""`memd import` of an archive someone else made: checked before anything is written, bounded, summarised
(issue 23). Real tar files, the real `memd` CLI."""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
from pathlib import Path
from typing import Any

from memd.sync.transfer import MAX_MEMBERS
from memd.tree import Home
from tests.procs import memd_env, run_memd
from tests.sync.helpers import make_home, text


def archive(path: Path, files: dict[str, bytes], *, scopes: list[dict[str, Any]] | None = None,
            mtimes: dict[str, int] | None = None, extra_members: int = 0) -> Path:  # fmt: skip
    manifest = {"format": 1, "host": "laptop", "scopes": scopes if scopes is not None else [{"dir": "global"}],
                "files": {p: {"mtime_ns": (mtimes or {}).get(p, 1_700_000_000_000_000_000)} for p in files}}  # fmt: skip
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in [("memd-export.json", json.dumps(manifest).encode()), *files.items()]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for i in range(extra_members):
            tar.addfile(tarfile.TarInfo(f"global/empty-{i}.md"), io.BytesIO(b""))
    return path


def imp(home: Home, path: Path, *args: str) -> Any:
    return run_memd(home.root, "import", str(path), *args, env=memd_env())


def test_a_failure_in_the_second_scope_is_found_before_the_first_is_written(tmp_path: Path) -> None:
    h = make_home(tmp_path, "h", None, git=False)
    (h.projects / "-work-shop").mkdir()
    (h.projects / "-work-shop" / "memory").write_text("a file where the memory directory should be")
    a = archive(tmp_path / "a.tar", {"global/tabs.md": text("tabs", "Use tabs.").encode(),
                                     "projects/shop-12345678/deploy.md": text("deploy", "Fridays.").encode()},
                scopes=[{"dir": "global"}, {"dir": "projects/shop-12345678", "key": "-work-shop",
                                            "identity": "key:-work-shop"}])  # fmt: skip
    r = imp(h, a)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "not a plain directory" in r.stderr
    assert not (h.global_memory / "tabs.md").exists()


def test_manifest_keys_memd_never_makes_are_refused_and_make_no_directory(tmp_path: Path) -> None:
    h = make_home(tmp_path, "h", None, git=False)
    for key in ("evil\nkey", "rtl\u202ekey", "../up"):
        a = archive(tmp_path / "k.tar", {"projects/x-12345678/a.md": text("a", "A.").encode()},
                    scopes=[{"dir": "projects/x-12345678", "key": key, "identity": f"key:{key}"}])  # fmt: skip
        r = imp(h, a)
        assert r.returncode == 2 and "is not one memd makes" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    for path in ("global/a\u202e.md", "global/x/../../b.md"):
        r = imp(h, archive(tmp_path / "p.tar", {path: text("a", "A.").encode()}))
        assert r.returncode == 2 and "not a memory path" in r.stderr
    assert sorted(p.name for p in h.projects.iterdir()) == []


def test_members_are_capped_with_the_cap_named_and_nothing_is_written(tmp_path: Path) -> None:
    h = make_home(tmp_path, "h", None, git=False)
    a = archive(tmp_path / "many.tar", {"global/one.md": text("one", "1").encode()}, extra_members=MAX_MEMBERS)
    r = imp(h, a)
    assert r.returncode == 2 and "MAX_MEMBERS" in r.stderr and str(MAX_MEMBERS) in r.stderr
    assert not h.global_memory.exists() or not any(h.global_memory.iterdir())


def test_stale_temporaries_are_swept_times_clamped_bad_files_kept_aside_and_the_output_is_a_summary(
        tmp_path: Path) -> None:  # fmt: skip
    h = make_home(tmp_path, "h", None, git=False)
    h.global_memory.mkdir(parents=True)
    old, young, other = (h.global_memory / n for n in (".tabs.md.k3j4h5g6.tmp", ".x.md.abcdefgh.tmp", ".notes.tmp"))
    for p in (old, young, other):
        p.write_text("half")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    os.utime(other, (time.time() - 3600, time.time() - 3600))
    files = {f"global/m{i:02d}.md": text(f"m{i:02d}", f"memory {i}").encode() for i in range(30)}
    files |= {"global/future.md": text("future", "f").encode(), "global/past.md": text("past", "p").encode(),
              "global/nofm.md": b"", "global/bin.md": b"\x00\x01binary",
              "global/big.md": text("big", "x" * (2 << 20)).encode()}  # fmt: skip
    a = archive(tmp_path / "a.tar", files, mtimes={"global/future.md": 2**80, "global/past.md": -(2**62)})
    r = imp(h, a)
    assert r.returncode == 0, r.stderr
    assert not old.exists() and young.exists() and other.exists()
    assert len(r.stdout.splitlines()) <= 6 and "m17.md" not in r.stdout, r.stdout
    assert "kept aside 3 file(s)" in r.stdout and "removed 1 temporary file(s)" in r.stdout
    assert (h.global_memory / "past.md").stat().st_mtime_ns >= 0
    assert (h.global_memory / "future.md").stat().st_mtime <= time.time() + 1
    assert not (h.global_memory / "nofm.md").exists() and not (h.global_memory / "bin.md").exists()
    assert (h.memd_dir / "quarantine" / "global" / "bin.md").read_bytes() == b"\x00\x01binary"
    log = [json.loads(line) for line in (h.memd_dir / "quarantine" / "log.jsonl").read_text().splitlines()]
    assert [e["kept"] for e in log if e["file"] == "big.md"] == [""]  # over the cap: noted, never read
    assert not (h.global_memory / "big.md").exists()
