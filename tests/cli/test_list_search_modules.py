"""`memd list` and `memd search` load only what they use (issue 27): no logging pipeline (structlog),
no YAML when every file is indexed, no write-path validator (its secret patterns)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from memd.index.refresh import refresh_dir
from memd.memory.file import render_memory
from memd.tree import Home
from tests.procs import memd_env

UNUSED = ("structlog", "yaml", "memd.memory.operations", "memd.redact.redactor", "memd.job.runner")
PROBE = """
import json, runpy, sys
sys.argv = ["memd", *sys.argv[1:]]
try:
    runpy.run_module("memd", run_name="__main__")
except SystemExit as exc:
    code = exc.code
print(json.dumps(sorted(m for m in sys.modules if m in %r)), file=sys.stderr)
""" % (UNUSED,)  # noqa: UP031 - a literal tuple in the probe's source


def _loaded(home: Path, *args: str) -> tuple[list[str], str]:
    r = subprocess.run([sys.executable, "-c", PROBE, "--home", str(home), *args], capture_output=True, text=True,
                       env=memd_env(), timeout=60)  # fmt: skip
    return json.loads(r.stderr.strip().splitlines()[-1]), r.stdout


def test_list_and_search_load_only_what_they_use(tmp_path: Path) -> None:
    home = Home(tmp_path / "h")
    d = home.project_memory("-p")
    d.mkdir(parents=True)
    (d / "deploy.md").write_text(render_memory("deploy", "deploys on Tuesdays", "project", "only Tuesdays"))
    refresh_dir(home, "project", "-p", d)
    loaded, out = _loaded(home.root, "list", "--all", "--json")
    assert loaded == [] and json.loads(out)["memories"][0]["name"] == "deploy"
    loaded, out = _loaded(home.root, "search", "tuesdays", "--project", "-p", "--json")
    assert loaded == [] and json.loads(out)[0]["name"] == "deploy"
    loaded, out = _loaded(home.root, "list", "--project", "-p")
    assert loaded == [] and "deploy" in out
