"""The page's changes, each through memd's one write path: the functions `memd review accept|reject|edit`,
`memd undo` and `memd edit` call, with their locks, validation, history and undo.

Every action returns one line saying what happened (and how to take it back); a refusal is a
`MemdError` whose message the page shows, nothing changed. A lock another process holds is waited
for `LOCK_WAIT` seconds at most (a page request must answer), then the action is refused as busy.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from memd import settings as st
from memd.git.commits import after_run
from memd.history import runs as history
from memd.history import store
from memd.job.context import JobContext, make_context
from memd.logs.events import get_logger
from memd.tree import Home
from memd.ui.views import find_memory, place_of
from memd.write import control, review

LOCK_WAIT = 20.0


def _context(home: Home, clock: Callable[[], datetime]) -> JobContext:
    return make_context(home, st.load(home.settings_file), log=get_logger("memd.ui"), now=clock)


def accept(home: Home, clock: Callable[[], datetime], pid: str) -> str:
    ctx = _context(home, clock)
    try:
        applied = review.accept(ctx, pid, lock_timeout=LOCK_WAIT)
    finally:
        ctx.conn.close()
    runs = ", ".join(applied.runs) or "no file changed"
    return f"accepted proposal {pid} (run {runs}; undo it from the memory's page or `memd undo`)"


def reject(home: Home, clock: Callable[[], datetime], pid: str) -> str:
    ctx = _context(home, clock)
    try:
        review.reject(ctx, pid)
    finally:
        ctx.conn.close()
    return f"rejected proposal {pid}"


def edit_proposal(home: Home, clock: Callable[[], datetime], pid: str, n: int, text: str) -> str:
    """Replace proposed file number `n`, validated first (an invalid file leaves the proposal as it was)."""
    ctx = _context(home, clock)
    try:
        review.replace_proposed(ctx, pid, n, _lf(text))
    finally:
        ctx.conn.close()
    return f"proposal {pid}: file {n + 1} changed; review the new diff before accepting"


def undo(home: Home, clock: Callable[[], datetime], scope: str, run_id: str) -> str:
    """`memd undo RUN --project KEY|--global`: the scope as it was before the run, itself undoable."""
    from memd.errors import UsageError  # noqa: PLC0415 - only here

    if not store.RUN_ID.match(run_id):
        raise UsageError(f"{run_id!r} is not a run id")
    place = place_of(scope)
    s = st.load(home.settings_file)
    info = history.undo(home, s, place, run_id, now=clock(), lock_timeout=LOCK_WAIT, logger=get_logger("memd.ui"))
    after_run(home, place, info, s)  # the undo as one commit when memd.git is on, as `memd undo` does
    return f"{place}: restored as before {run_id} (this undo is run {info.get('run')}, itself undoable)"


def edit_memory(home: Home, clock: Callable[[], datetime], scope: str, file: str, base: str, text: str) -> str:
    """`memd edit`: the whole file replaced by the user's text if it still holds what the page showed."""
    place = place_of(scope)
    m = find_memory(home, place, file)
    new = _lf(text)
    if new.encode("utf-8") == m.path.read_bytes():
        return f"no change to {file}"
    ctx = _context(home, clock)
    try:
        applied: Any = control.save_edit(ctx, m, base or None, new)
    finally:
        ctx.conn.close()
    return f"saved {file} (run {', '.join(applied.runs) or '-'}; undo it below or with `memd undo`)"


def _lf(text: str) -> str:
    """A browser's textarea sends CRLF line ends: the file keeps the LF ones it had."""
    return text.replace("\r\n", "\n")
