"""`memd run-now index` with nothing changed (issue 27 point 4): the modules its process loads, and the
hand edit it must still see. structlog comes without `rich` (installed here through the dev tools:
structlog's console renderer would import it to colour tracebacks); a memory edited in place (same
inode, its own stat changed, the directory's not) is seen by the next check, as is a file added."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memd.memory.file import render_memory
from tests.procs import memd_env, modules_loaded

WATCHED = ("structlog", "rich", "memd.ledger.scan", "msgspec", "memd.llm.types", "memd.git.commits")


def _home(root: Path) -> Path:
    for key in ("-a", "-b"):
        d = root / "projects" / key / "memory"
        d.mkdir(parents=True)
        for i in range(3):
            (d / f"m{i}.md").write_text(render_memory(f"m{i}", f"about m{i} of {key}", "project", f"body {i}"))
    return root


@pytest.mark.skipif(importlib.util.find_spec("rich") is None, reason="rich is not installed: nothing to keep out")
def test_run_now_index_loads_structlog_without_rich(tmp_path: Path) -> None:
    home = _home(tmp_path / "h")
    modules_loaded(home, WATCHED, "run-now", "index")
    loaded, out = modules_loaded(home, WATCHED, "run-now", "index")  # nothing changed
    assert loaded == ["structlog"] and "index project:-a: ok" in out


def test_run_now_index_loads_structlog_without_asyncio_or_uuid(tmp_path: Path) -> None:
    """structlog imports asyncio for async methods memd never calls (15-20 ms of start-up), and uuid with
    platform for the deprecated `structlog.threadlocal`: deferred (the run ids need no uuid either)."""
    home = _home(tmp_path / "h")
    loaded, out = modules_loaded(home, ("structlog", "asyncio", "ssl", "uuid"), "run-now", "index")
    assert loaded == ["structlog"] and "index project:-a: ok" in out


def test_structlogs_deferred_uuid_is_the_real_one_when_used() -> None:
    """`structlog.threadlocal.wrap_dict`, the one user of its `uuid`, still works: the real module then."""
    code = (
        "import sys, warnings\n"
        "from memd.logs.lazy import import_structlog\n"
        "structlog = import_structlog()\n"
        "assert 'uuid' not in sys.modules\n"
        "warnings.simplefilter('ignore')\n"
        "wrapped = structlog.threadlocal.wrap_dict(dict)\n"
        "import uuid\n"
        "assert uuid.__spec__ is not None and sys.modules['uuid'] is uuid\n"
        "print(wrapped.__name__)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=memd_env(), timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith("WrappedDict-")


def test_structlogs_deferred_asyncio_is_the_real_one_when_used() -> None:
    """The module structlog holds for asyncio imports the real one at its first use (an async log
    method works); once structlog is imported, `import asyncio` is the real module."""
    code = (
        "import sys\n"
        "from memd.logs.lazy import import_structlog\n"
        "structlog = import_structlog()\n"
        "assert 'asyncio' not in sys.modules\n"
        "import structlog.stdlib as stdlib\n"
        "async def main():\n"
        "    await stdlib.get_logger('t').ainfo('async line')\n"
        "    return 'done'\n"
        "import asyncio\n"
        "assert asyncio.__spec__ is not None and sys.modules['asyncio'] is asyncio\n"
        "print(asyncio.run(main()))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=memd_env(), timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("done") and "async line" in r.stdout + r.stderr


def test_a_hand_edit_in_place_and_a_new_file_are_seen_by_the_next_check(tmp_path: Path) -> None:
    home = _home(tmp_path / "h")
    for _ in range(2):  # the second finds nothing changed and leaves its record
        modules_loaded(home, WATCHED, "run-now", "index")
    d = home / "projects" / "-a" / "memory"
    before = (d / "m1.md").stat()
    with open(d / "m1.md", "r+") as fh:  # in place: the directory's own entry does not change
        fh.seek(0)
        fh.write(render_memory("m1", "edited by hand", "project", "body 1"))
        fh.truncate()
    os.utime(d / "m1.md", ns=(before.st_atime_ns, before.st_mtime_ns + 2_000_000_000))
    (home / "projects" / "-b" / "memory" / "m3.md").write_text(render_memory("m3", "new by hand", "user", "b"))
    assert (d / "m1.md").stat().st_ino == before.st_ino
    modules_loaded(home, WATCHED, "run-now", "index")
    assert "edited by hand" in (d / "MEMORY.md").read_text()
    assert "new by hand" in (home / "projects" / "-b" / "memory" / "MEMORY.md").read_text()
    _loaded, out = modules_loaded(home, WATCHED, "list", "--all", "--json")
    got = {(m["project_key"], m["name"]): m["description"] for m in json.loads(out)["memories"]}
    assert got["-a", "m1"] == "edited by hand" and got["-b", "m3"] == "new by hand" and got["-b", "m1"] == "about m1 of -b"
