"""`memd list` and `memd search` load only what they use (issue 27): no logging pipeline (structlog),
no YAML when every file is indexed, no write-path validator (its secret patterns)."""

from __future__ import annotations

import json
from pathlib import Path

from memd.index.refresh import refresh_dir
from memd.memory.file import render_memory
from memd.tree import Home
from tests.procs import modules_loaded

UNUSED = ("structlog", "yaml", "memd.memory.operations", "memd.redact.redactor", "memd.job.runner")


def test_list_and_search_load_only_what_they_use(tmp_path: Path) -> None:
    home = Home(tmp_path / "h")
    d = home.project_memory("-p")
    d.mkdir(parents=True)
    (d / "deploy.md").write_text(render_memory("deploy", "deploys on Tuesdays", "project", "only Tuesdays"))
    refresh_dir(home, "project", "-p", d)
    loaded, out = modules_loaded(home.root, UNUSED, "list", "--all", "--json")
    assert loaded == [] and json.loads(out)["memories"][0]["name"] == "deploy"
    loaded, out = modules_loaded(home.root, UNUSED, "search", "tuesdays", "--project", "-p", "--json")
    assert loaded == [] and json.loads(out)[0]["name"] == "deploy"
    loaded, out = modules_loaded(home.root, UNUSED, "list", "--project", "-p")
    assert loaded == [] and "deploy" in out
