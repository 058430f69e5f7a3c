"""`kill -9` during an index write leaves `.MEMORY.md.*.tmp` / `.memory.md.*.tmp` (issue 23): the next index
write sweeps those over a minute old (memd's own naming only); the index job does too."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tests.procs import memd_env, run_memd


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / "memory").mkdir(parents=True)
    (home / "settings.json").write_text(json.dumps({"memd": {"provider": "offline"}}))
    return home


def _plant(home: Path, age_s: float, *paths: Path) -> None:
    for p in paths:
        p.write_text("half a view")
        t = time.time() - age_s
        os.utime(p, (t, t))


def test_the_next_index_write_sweeps_what_a_killed_one_left(tmp_path: Path) -> None:
    home = _home(tmp_path)
    stale = [home / "memory" / ".MEMORY.md.a1b2c3d4.tmp", home / ".memory.md.k2j3h4g5.tmp"]
    kept = [home / "memory" / ".MEMORY.md.fresh123.tmp", home / "memory" / ".notes.md.x1y2z3.tmp",
            home / ".bashrc.tmp", home / "memory" / "MEMORY.md.tmp"]  # fmt: skip
    _plant(home, 120, *stale, *kept[1:])
    _plant(home, 5, kept[0])
    r = run_memd(home, "remember", "--global", "--type", "feedback", "Always run the linter before committing.",
                 env=memd_env())  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert not any(p.exists() for p in stale), [p for p in stale if p.exists()]
    assert all(p.exists() for p in kept)


def test_the_index_job_sweeps_temporaries_older_than_a_minute(tmp_path: Path) -> None:
    home = _home(tmp_path)
    left = home / "memory" / ".MEMORY.md.q9w8e7r6.tmp"
    _plant(home, 120, left)
    r = run_memd(home, "run-now", "index", "--global", "--json", env=memd_env())
    assert r.returncode == 0, r.stderr
    assert not left.exists()
