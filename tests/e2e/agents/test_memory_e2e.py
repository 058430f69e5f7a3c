"""A real Claude Code and `memd run` side by side (issue 11, "Done when"): sessions in a repository
root, a sub-directory and a worktree; memd writes each durable statement to the memory directory of
the canonical git root, and the next session's first request carries it.

memd runs with the offline provider (its rules make the memory; no model call of memd's), so every
request the fake sees is Claude Code's own.
"""

from __future__ import annotations

import json
from pathlib import Path

from memd.keys import cwd_key, project_key
from tests.fakeapi import FakeAnthropic, text
from tests.procs import DaemonProc, memd_env, wait_for
from tests.realclaude import ClaudeInstall, run_claude
from tests.test_keys import git, make_repo

STATEMENTS = {
    "root": "We decided to use Postgres 16 for the billing service.",
    "sub": "We decided to use ruff for linting in this repository.",
    "worktree": "We decided to require two reviews for every migration.",
}
MARKS = {"root": "Postgres", "sub": "ruff", "worktree": "two reviews"}


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def test_memory_written_beside_a_real_claude_reaches_its_next_session(
    claude: ClaudeInstall, claude_home: Path, tmp_path: Path, ground_truth: list[str]
) -> None:
    config = claude_home / ".claude"
    (config / "settings.json").write_text(json.dumps({"memd": {"provider": "offline"}}))
    repo = make_repo(tmp_path / "repo").resolve()
    (repo / "src").mkdir()
    git("worktree", "add", "-q", str(tmp_path / "wt"), "-b", "topic", cwd=repo)
    cwds = {"root": repo, "sub": repo / "src", "worktree": (tmp_path / "wt").resolve()}
    index = config / "projects" / project_key(repo) / "memory" / "MEMORY.md"
    with FakeAnthropic(default=text("Noted.")) as api, DaemonProc(config, env=memd_env()) as daemon:
        for label, cwd in cwds.items():
            run = run_claude(STATEMENTS[label], cwd, config, api.url, claude=claude)
            assert run.returncode == 0, run.stderr
            assert (config / "projects" / cwd_key(cwd)).is_dir()
            wait_for(lambda label=label: MARKS[label] in _read(index))
            before = len(api.message_requests)
            nxt = run_claude("hello again", cwd, config, api.url, claude=claude)
            assert nxt.returncode == 0, nxt.stderr
            first = json.dumps(api.message_requests[before])
            assert MARKS[label] in first, f"{label}: the next session's first request lacks the memory"
            ground_truth.append(f"memd beside Claude Code {claude.version}: {label} session's memory reached "
                                f"the next session's first request (written to {index.parent.parent.name})")
        assert daemon.stop() == 0
    assert not (config / "projects" / cwd_key(cwds["sub"]) / "memory").exists()
    assert not (config / "projects" / cwd_key(cwds["worktree"]) / "memory").exists()
