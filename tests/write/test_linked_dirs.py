"""`memory/` and `projects/` as links to elsewhere (issue 23): refused as a link at `memd/` is, nothing written
through them. The real `memd` CLI on real files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.procs import memd_env, run_memd


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps({"memd": {"provider": "offline"}}))
    return home


@pytest.mark.parametrize("link", ["memory", "projects", "projects/-work-shop"])
def test_a_memory_directory_reached_through_a_link_is_never_written(tmp_path: Path, link: str) -> None:
    home = _home(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (home / link).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(elsewhere, home / link)
    args = ["--global"] if link == "memory" else ["--project", "-work-shop"]
    r = run_memd(home, "remember", *args, "--type", "feedback", "Always run the linter before committing.",
                 env=memd_env())  # fmt: skip
    assert r.returncode != 0 and "symlink" in (r.stderr + r.stdout), (r.stdout, r.stderr)
    target = ["--global"] if link == "memory" else ["--project", "-work-shop"]
    r = run_memd(home, "run-now", "index", *target, "--json", env=memd_env())
    # no MEMORY.md through the link either: skipped (or, for a project never seen here, unknown: exit 2)
    assert (r.returncode == 2 and link != "memory") or json.loads(r.stdout)[0]["outcome"] == "skipped", r
    assert not [p for p in elsewhere.rglob("*") if p.is_file()], list(elsewhere.rglob("*"))
