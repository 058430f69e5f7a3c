"""`memd list --all --json` puts memories in one order — global first, then by project key, type
and name — though it now sorts a directory at a time (issue 27 pt 4), and keeps the problems in
the directories' order; a file changed since the index is read, not taken from its stale row."""

from __future__ import annotations

import json
from pathlib import Path

from memd.index.refresh import refresh_dir
from memd.memory.file import render_memory
from memd.tree import Home
from tests.procs import run_memd


def test_list_all_is_in_one_order_across_directories(tmp_path: Path) -> None:
    home = Home(tmp_path / "h")
    dirs = {"global": home.global_memory, "-b": home.project_memory("-b"), "-a": home.project_memory("-a"),
            "-a-x": home.project_memory("-a-x")}  # fmt: skip
    for i, (key, d) in enumerate(dirs.items()):
        d.mkdir(parents=True)
        for name, typ in (("zeta", "user"), ("alpha", "reference"), ("Beta", "feedback"), ("beta2", "feedback")):
            (d / f"{name}.md").write_text(render_memory(name, f"{name} in {key}", typ, f"body {i}"))
        (d / "broken.md").write_text("---\nname: [x\n---\n")
        refresh_dir(home, "global" if key == "global" else "project", None if key == "global" else key, d)
    (dirs["-b"] / "zeta.md").write_text(render_memory("zeta", "rewritten after the index", "project", "new"))
    r = run_memd(home.root, "list", "--all", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    got = [(m["scope"], m["project_key"], m["type"], m["name"]) for m in out["memories"]]
    assert got == sorted(got, key=lambda e: (e[0] != "global", e[1] or "", e[2], e[3]))
    assert got[:4] == [("global", None, "feedback", "Beta"), ("global", None, "feedback", "beta2"),
                       ("global", None, "reference", "alpha"), ("global", None, "user", "zeta")]  # fmt: skip
    assert [m["project_key"] for m in out["memories"] if m["scope"] == "project"][::4] == ["-a", "-a-x", "-b"]
    assert ("project", "-b", "project", "zeta") in got  # read from the file: its row still said "user"
    assert len(out["problems"]) == 4 and all(p["file"].endswith("/broken.md") for p in out["problems"])
