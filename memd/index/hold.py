"""When the daemon leaves a project's MEMORY.md alone for now: while an agent is at work there (SPEC §14).

Claude Code's auto-memory saves a memory in steps within one turn: it writes a topic file, Reads
`MEMORY.md`, then Edits it. A rewrite by memd between that Read and that Edit leaves the agent's view
stale: Claude Code 2.1.332 then refuses the Edit ("File has been modified since read") or applies it
with a note that the file "contains other changes not in your context", and the model spends a turn
reading it again. So the daemon's rewrites of a project's `MEMORY.md` wait until the project's
transcripts (`transcript_keys`: its own, its subdirectories', its worktrees') have been quiet for
`memd.agentQuietSeconds`. Everything else is written at once: the
memory files (new files, which no Read of the agent's covers), the drawer and search.

The wait is bounded twice: it never exceeds the quiet time past the agent's last append (a clock
that puts an append in the future does not hold longer), and a `MEMORY.md` nobody has written for
`MAX_HOLD_SECONDS` (one not there yet: whose oldest memory is that old) is rewritten even under an
agent that never pauses (the merge of
`memd.index.refresh.write_index` keeps whatever the agent writes meanwhile). Commands a person
runs (`memd run-now`, `undo`, `remember`) never wait: only the daemon's jobs pass a hold.

Invariant: a held rewrite is not lost. The refresh reports it (`RefreshResult.index_held`), keeps no
fingerprint record that would call the directory current, and the daemon runs the index again when
the quiet time is over (`JobContext.hold_index`).
"""

from __future__ import annotations

import os
from pathlib import Path

MAX_HOLD_SECONDS = 600.0
TEST_ENV = "MEMD_TEST_AGENT_QUIET_SECONDS"  # tests only: the suite's daemons write at once unless a test asks


def hold_seconds(now: float, agent_at: float | None, index_at: float | None, quiet: float,
                 max_hold: float = MAX_HOLD_SECONDS) -> float:  # fmt: skip
    """Pure: how many seconds a rewrite of MEMORY.md should still wait; 0 means write now.

    `agent_at`: the newest append to one of the project's transcripts (None: none); `index_at`:
    when MEMORY.md was last written by anyone (None: it does not exist yet)."""
    if quiet <= 0 or agent_at is None:
        return 0.0
    left = min(agent_at + quiet - now, quiet)
    if left <= 0:
        return 0.0
    if index_at is not None and now - index_at >= max_hold:
        return 0.0
    return left


def quiet_seconds(configured: int) -> float:
    """The quiet time in force: the setting, unless the test suite's daemons override it."""
    raw = os.environ.get(TEST_ENV)
    if raw:
        try:
            return max(0.0, float(raw))
        except ValueError:
            pass
    return float(configured)


def newest_append(project_dir: Path, now: float) -> float | None:
    """The newest mtime among a project's transcripts: `<sid>.jsonl` at the top, and the subagents'
    `<sid>/subagents/*.jsonl` of sessions whose own transcript moved within `MAX_HOLD_SECONDS`
    (a subagent at work does not append its parent's file). None when there is none."""
    newest: float | None = None
    recent: list[str] = []
    try:
        with os.scandir(project_dir) as it:
            for e in it:
                if not e.name.endswith(".jsonl"):
                    continue
                try:
                    mtime = e.stat(follow_symlinks=False).st_mtime
                except OSError:
                    continue
                newest = mtime if newest is None else max(newest, mtime)
                if now - mtime < MAX_HOLD_SECONDS:
                    recent.append(e.name[: -len(".jsonl")])
    except OSError:
        return None
    for sid in recent:
        try:
            with os.scandir(project_dir / sid / "subagents") as it:
                for e in it:
                    if e.name.endswith(".jsonl"):
                        try:
                            newest = max(newest or 0.0, e.stat(follow_symlinks=False).st_mtime)
                        except OSError:
                            continue
        except OSError:
            continue
    return newest


def transcript_keys(projects: Path, state_db: Path, key: str) -> set[str]:
    """The transcript directories whose sessions work on project `key`'s memory: its own; its subdirectories'
    (Claude Code files a session under its cwd's key, its memory under the git root's, `memd.keys`); and
    every directory whose sessions' extraction went to `key` (a linked worktree: the extract cursors'
    `memory_key`). A sibling whose name merely starts like it only makes the wait longer, never shorter."""
    out = {key}
    try:
        out.update(n for n in os.listdir(projects) if n.startswith(key + "-"))
    except OSError:
        pass
    if not state_db.exists():
        return out
    import sqlite3  # noqa: PLC0415 - only when a rewrite is due

    try:
        conn = sqlite3.connect(f"{state_db.absolute().as_uri()}?mode=ro", uri=True, timeout=1.0)  # `?`, `#`, `%` escaped
        try:
            rows = conn.execute(
                "SELECT DISTINCT s.key FROM sessions s JOIN cursors c ON c.job = 'extract' "
                "AND c.target = 'session:' || s.key || ':' || s.session_id "
                "WHERE json_extract(c.value, '$.memory_key') = ?", (key,)).fetchall()  # fmt: skip
        finally:
            conn.close()
    except sqlite3.Error:
        return out
    out.update(str(r[0]) for r in rows if r[0])
    return out


def index_hold(project_dirs: list[Path], index: Path, now: float, quiet: float) -> float:
    """Seconds the daemon's rewrite of `index` (a project's MEMORY.md) should still wait (I/O around
    `hold_seconds`): the newest append over `project_dirs` (`transcript_keys`' directories)."""
    if quiet <= 0:
        return 0.0
    appends = [t for d in project_dirs if (t := newest_append(d, now)) is not None]
    if not appends:
        return 0.0
    return hold_seconds(now, max(appends), _written_at(index), quiet)


def _written_at(index: Path) -> float | None:
    """When `index` was last written, for the longest hold. A MEMORY.md not there yet counts from the
    oldest memory beside it: a memory nobody has indexed for `MAX_HOLD_SECONDS` gets its index under an
    agent that never pauses too. None: no MEMORY.md and no memory (nothing to bound yet)."""
    try:
        return index.lstat().st_mtime
    except OSError:
        pass
    oldest: float | None = None
    try:
        with os.scandir(index.parent) as it:
            for e in it:
                if e.name.endswith(".md") and e.name != index.name and not e.name.startswith("."):
                    try:
                        t = e.stat(follow_symlinks=False).st_mtime
                    except OSError:
                        continue
                    oldest = t if oldest is None else min(oldest, t)
    except OSError:
        return None
    return oldest
