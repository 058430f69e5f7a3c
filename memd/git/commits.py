"""Git-backed memory (`memd.git`, off by default): every memd write is one commit.

**One repository for the whole home**, `$DEEPCODE_HOME/memd/git`, a plain bare
repository (`git -C ~/.deepcode/memd/git log` works; clone it, fix by hand, push).
Its tree is laid out by *identity*, not by local path:

    manifest.json               which project each directory is: identity, and its key on each machine
    global/<file>.md            the global drawer
    projects/<dir>/<file>.md    one project's memory; <dir> = a readable slug of the identity + 8 hex of its hash

A project's identity is its repository's normalised remote URL
(`github.com/acme/webshop`), else `key:<its local key>`: the same repository
checked out at different paths has different keys on different machines, so
local paths cannot be the synced layout. memd therefore maps each memory
directory onto its place in the tree itself: a commit's tree is built with
`git fast-import`, fed the exact bytes memd scanned (one process a commit; a pack
for a big commit, loose objects for a small one; the branch moves only if the new
commit contains its current tip).
The live memory directories are the work tree through that mapping; there is no
second copy of the files.

Why one repository and not one per scope: a sync is then one fetch and one push
whatever the number of projects, to the one URL in settings; a merge of several
scopes is one commit; `git log` shows one history. Per-scope repositories would
need a remote per scope and N round trips per sync. Measured (bench/bench_sync.py,
bench/RESULTS.md "Sync"): the first commit of a home of 1,000 memories takes 0.2 s
(most of it the secret scan of each file), one memd write with its commit 20 ms
(7 ms without git), a scan of the whole home with nothing to commit 28 ms.

Why the git command line and not a library: dulwich (pure Python) or pygit2
(libgit2) would add a dependency whose on-disk behaviour can lag git's own (packed
refs, reflogs, lock files, `safe.directory`), while the point is a repository the
user's own `git` reads and repairs; the CLI is on every machine that has a git
remote at all, its plumbing output is a stable interface, and its ref updates are
atomic under git's own lock files. The cost is process start-up, which the numbers
above include: a write costs one `git fast-import` (trees of recent commits are kept
in memory, so a daemon does not list the tree again).

What is tracked: memory files only — visible `*.md` files of a memory directory
other than `MEMORY.md`. `MEMORY.md`, the drawer render and the search database are
derived and rebuilt on each machine; tracking them would make every sync conflict
on the index.

Secrets never leave the machine: every file is scanned (`memd.redact.redactor`) before it
is staged, in every commit (with or without a remote today: any commit may be
pushed later). A file that fails is not committed (its last clean version stays,
or nothing), is listed in `memd/gitmem.json` for `memd status`, and logged.

Locks: all git work on the repository happens under `memd/locks/git.lock`, a leaf
lock taken after the scope locks (global → project) and never held while waiting
for one. Under it, any `*.lock` file git left in the repository is a leftover of a
killed process and is removed. The writers call `after_run` once their history run
is durable (extraction, remember/edit/forget, review, MCP, migrations, dream, undo); the
index job calls `after_index`. Neither raises into the write path: a failed commit is logged and the next index run
or sync commits the change.

Commits: one per history run of a scope (`Recorder.commit`), so a write that changed
the drawer and a project is two commits sharing one `Memd-Run`; one per dream swap;
one per index run that finds hand edits (authored by the user, committed by memd).

Crash safety: objects are written before the ref moves, and the ref only moves
forward (fast-import's check, or `update-ref <new> <old>` for a fast-forward); a
`kill -9` anywhere leaves `main` on a complete commit.
Files a sync wrote into a memory directory before the ref moved are seen by the
next scan as local changes and committed; the merge that follows finds them equal
on both sides.

Where the code is:

    memd/git/commits.py       this overview; the hooks memd's writers call, and whether memd.git is on
    memd/git/repo.py      the repository: its lock and state file, local projects' identities, commits
    memd/git/worktree.py  the live directories as work tree: the scan before a commit, writes into them
    memd/git/layout.py    the tree's layout: memory file names, project identities, manifest.json
    memd/git/plumbing.py       running git: refs, trees, blobs, fast-import, commit messages
    memd/sync/run.py         fetch, merge and push with a remote (merge rules: memd/sync/merge.py)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memd.git.repo import GitBusy, Repo
from memd.logs.lazy import lazy_logger
from memd.settings import Settings
from memd.tree import Home, Place

log = lazy_logger("memd.gitmem")

def enabled(settings: Settings) -> bool:
    return settings.memd.git


# --------------------------------------------------------------------------- the hooks


def _lock_timeout(settings: Settings) -> float:
    return float(settings.memd.lock_timeout_seconds)


def _guarded(what: str, fn: Callable[[], None]) -> None:
    """A hook never breaks the write it follows: the next index run or sync commits what it missed."""
    try:
        fn()
    except GitBusy as exc:
        log.info("git.commit_deferred", hook=what, reason=str(exc))
    except Exception as exc:
        log.warning("git.commit_failed", hook=what, reason=str(exc))


def _scope_trailer(place: Place) -> str:
    return str(place)


def after_run(home: Home, place: Place, info: dict[str, Any] | None, settings: Settings) -> None:
    """What every writer calls once its history run is durable: the run as one commit.

    A write run (`Recorder.commit`'s info) commits its files; a dream or an undo swap
    (`kind` "dream" or "undo") commits the whole directory. None (nothing changed) commits nothing.
    """
    if info is None or not info.get("run"):
        return  # nothing changed: no run, no commit
    if info.get("kind") == "write":
        after_write(home, place, info, settings)
    else:
        after_swap(home, place, str(info.get("run") or ""), settings)


def after_write(home: Home, place: Place, info: dict[str, Any], settings: Settings) -> None:
    """After a history write run (`Recorder.commit`): its files as one commit naming run, job and reason."""
    if not enabled(settings):
        return

    def go() -> None:
        files = set((info.get("files") or {}).keys())
        counts = ", ".join(f"{len(v)} {k}" for k, v in (info.get("changes") or {}).items() if v)
        subject = f"{info.get('job') or 'write'}: {info.get('reason') or ''} ({counts or 'no change'})"
        with Repo(home).locked(_lock_timeout(settings)) as repo:
            repo.ensure_initial(settings, exclude={place: files})
            repo.commit([place], names={place: files}, subject=subject, trailers={
                "Memd-Run": str(info.get("run") or ""), "Memd-Job": str(info.get("job") or ""),
                "Memd-Scope": _scope_trailer(place)})  # fmt: skip

    _guarded("write", go)


def after_swap(home: Home, place: Place, run_id: str, settings: Settings) -> None:
    """After a dream (or a dream undo) swapped a whole directory in: one commit of that directory."""
    if not enabled(settings):
        return

    from memd.history.store import history_root, read_run  # noqa: PLC0415 - start-up
    def go() -> None:
        info = read_run(history_root(home, place) / run_id) or {}
        kind = str(info.get("kind") or "dream")
        counts = ", ".join(f"{len(v)} {k}" for k, v in (info.get("changes") or {}).items() if isinstance(v, list) and v)
        what = f"undo of {info.get('undo_of')}" if kind == "undo" else f"consolidation ({info.get('provider') or '?'})"
        with Repo(home).locked(_lock_timeout(settings)) as repo:
            repo.ensure_initial(settings)
            repo.commit([place], subject=f"{kind}: {what} ({counts or 'no change'})", materialize=True,
                        settings=settings, trailers={"Memd-Run": run_id, "Memd-Job": kind,
                                                     "Memd-Scope": _scope_trailer(place)})  # fmt: skip

    _guarded("swap", go)


def after_index(home: Home, place: Place, settings: Settings) -> None:
    """The index job's turn: whatever changed by hand in this directory, as the user's commit."""
    if not enabled(settings):
        return

    def go() -> None:
        with Repo(home).locked(_lock_timeout(settings)) as repo:
            repo.ensure_initial(settings)
            repo.commit([place], subject=f"hand edits in {place}", user=True, materialize=True, settings=settings,
                        trailers={"Memd-Job": "hand-edit", "Memd-Scope": _scope_trailer(place)})  # fmt: skip

    _guarded("index", go)
