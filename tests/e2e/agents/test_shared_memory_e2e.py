"""Claude Code's own auto-memory and `memd run` writing one memory folder (SPEC §14, issue 22 point 1).

A real Claude Code session whose model (the fake API) saves a memory as Claude Code's auto-memory does —
a topic file written with the Write tool and a pointer added to `MEMORY.md` with Read + Edit — while
memd's daemon maintains the same folder and extracts a memory of its own from the session. Both memories
and every index line survive: Claude Code's pointers, its note that no file backs, its topic file without
front matter, and memd's lines. On main the daemon's first index run replaced the agent's MEMORY.md; later
its index run, set off by the agent's topic file, rewrote MEMORY.md between the agent's Read and its Edit
(now it waits for the session to go quiet, memd.index.hold).
"""

from __future__ import annotations

import json
from pathlib import Path

from memd.index.render import INDEX_HEADER
from memd.keys import project_key
from tests.fakeapi import FakeAnthropic, request_tool_results, text, tool_use
from tests.procs import DaemonProc, memd_env, run_memd, wait_for
from tests.realclaude import ClaudeInstall, run_claude
from tests.test_keys import make_repo

NOTE = "The flaky test is tests/test_hooks.py::test_timeout; rerun it once before debugging."
DEBUG_POINTER = "- [Debugging](debugging.md) — how to debug the suite"
DEBUGGING = "# Debugging notes\n\nRun the suite with -x; the fixtures leak temp dirs when interrupted.\n"
FLAKY_POINTER = "- [Flaky test](flaky_test.md) — which test flakes and what to do"
FLAKY = ("---\nname: Flaky test\ndescription: which test flakes and what to do\ntype: project\n---\n\n"
         "tests/test_hooks.py::test_timeout flakes under load; rerun it once.\n")  # fmt: skip
QUIET = 15  # memd.agentQuietSeconds: the daemon leaves MEMORY.md alone until the session has been this quiet
STATEMENT = "We decided to use Postgres 16 for the billing service."


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def test_auto_memory_and_memd_share_the_folder_and_nothing_is_lost(
    claude: ClaudeInstall, claude_home: Path, tmp_path: Path, ground_truth: list[str]
) -> None:
    config = claude_home / ".claude"
    (config / "settings.json").write_text(json.dumps({"memd": {"provider": "offline", "agentQuietSeconds": QUIET}}))
    repo = make_repo(tmp_path / "repo").resolve()
    memdir = config / "projects" / project_key(repo) / "memory"
    memdir.mkdir(parents=True)
    index = memdir / "MEMORY.md"
    index.write_text(f"{DEBUG_POINTER}\n{NOTE}\n")  # an earlier session's auto-memory: a pointer and a note
    (memdir / "debugging.md").write_text(DEBUGGING)  # the docs' topic file: no front matter

    with FakeAnthropic(default=text("Noted.")) as api, DaemonProc(config, env=memd_env(MEMD_TEST_AGENT_QUIET_SECONDS="")) as daemon:
        wait_for(lambda: INDEX_HEADER in _read(index))  # memd's first index run over the agent's file
        assert f"{DEBUG_POINTER}\n{NOTE}\n" in _read(index)
        api.enqueue(
            tool_use("Write", {"file_path": str(memdir / "flaky_test.md"), "content": FLAKY}, id="toolu_w"),
            tool_use("Read", {"file_path": str(index)}, id="toolu_r"),
            tool_use("Edit", {"file_path": str(index), "old_string": NOTE, "new_string": f"{NOTE}\n{FLAKY_POINTER}"},
                     id="toolu_e"),
            text("Saved that to memory."),
        )
        run = run_claude(STATEMENT, repo, config, api.url, args=["--allowedTools", "Write,Read,Edit"], claude=claude)
        assert run.returncode == 0, run.stderr
        results = {r["tool_use_id"]: r for r in request_tool_results(api.message_requests[-1])}
        assert not any(r.get("is_error") for r in results.values()), results  # Claude Code's own writes went in
        # and memd did not rewrite MEMORY.md between the agent's Read and its Edit (memd.index.hold): on main the
        # topic file set off an index run there, and 2.1.332 refused the Edit or applied it with this note
        assert "modified on disk" not in str(results["toolu_e"]["content"]), results["toolu_e"]
        wait_for(lambda: "Postgres" in _read(index) and FLAKY_POINTER in _read(index))  # memd's memory beside
        nxt_from = len(api.message_requests)
        nxt = run_claude("hello again", repo, config, api.url, claude=claude)
        assert nxt.returncode == 0, nxt.stderr
        assert daemon.stop() == 0
    # the pointer the agent added after memd's last run is there; the next index run keeps it and adds no twin
    assert run_memd(config, "run-now", "index", "--project", project_key(repo)).returncode == 0

    # Claude Code 2.1.332 rewrites the front matter of a file its Write puts in the memory folder (name slugged,
    # `metadata: {node_type: memory, type, originSessionId, modified}`): the body is the model's, the file its own.
    assert "test_timeout flakes under load" in (memdir / "flaky_test.md").read_text()
    assert (memdir / "debugging.md").read_text() == DEBUGGING
    ours = [p for p in memdir.glob("*.md") if "Postgres" in p.read_text() and p.name != "MEMORY.md"]
    assert len(ours) == 1, sorted(p.name for p in memdir.iterdir())
    final = _read(index)
    for line in (DEBUG_POINTER, NOTE, FLAKY_POINTER, f"]({ours[0].name}) — "):
        assert line in final, (line, final)
    assert final.count("flaky_test.md") == 1 and final.count("(debugging.md)") == 1  # indexed once each
    first = json.dumps(api.message_requests[nxt_from])
    assert NOTE in first and "Postgres" in first and "flaky_test.md" in first  # the next session loads them all
    ground_truth.append(f"auto-memory beside memd run ({claude.version}): the agent's topic file, pointer and note "
                        "and memd's extracted memory all in MEMORY.md, and in the next session's first request")
