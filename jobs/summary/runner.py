"""One summary run: read the span since the cursor, summarise it, write `summary.md`, move the cursor.

`summary.md` is replaced atomically; the cursor moves after the rename, so a
crash repeats an update and never skips one (DESIGN "Cursor rule").
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from jobs.summary.document import (
    FOOTER_PREFIX,
    Summary,
    finish,
    parse_summary,
    redact,
    render_summary,
)
from jobs.summary.offline import conversation_of, offline_summary
from jobs.summary.prompt import EmptyAnswer, model_summary
from jobs.summary.trigger import NAME, Cursor, Facts, Thresholds, summary_due
from memd.clock import iso
from memd.fsutil import atomic_write, ensure_private_dir
from memd.job.context import JobContext, RunResult, get_cursor, set_cursor
from memd.ledger.pause import Follow, follow
from memd.ledger.pause import words as pause_words
from memd.transcripts.formats import tokens_of
from memd.transcripts.spans import Span, read_span
from memd.tree import Place

# A previous summary larger than this (a user's paste) is read only this far.
MAX_PREVIOUS_BYTES = 1 << 20


def facts_of(row: Any) -> Facts:
    return Facts(
        offset=int(row["safe_offset"]),
        tokens=tokens_of(int(row["safe_conv_chars"])),
        tool_calls=int(row["safe_tool_calls"]),
        natural_break=bool(row["natural_break"]),
        tool_pending=int(row["tool_pending"]),
    )


def cursor_of(ctx: JobContext, target: Place) -> Cursor | None:
    """The stored cursor, but only while its summary exists: a deleted summary.md is rebuilt whole."""
    assert target.key and target.session_id
    if not ctx.home.summary_file(target.key, target.session_id).is_file():
        return None
    return Cursor.of(get_cursor(ctx.conn, NAME, str(target)))


def _row(ctx: JobContext, target: Place) -> Any:
    return ctx.conn.execute(
        "SELECT * FROM sessions WHERE key=? AND session_id=? AND is_subagent=0", (target.key, target.session_id)
    ).fetchone()


def read_previous(path: Path) -> Summary | None:
    """The summary on disk (a user may have edited it: their words stand), or None."""

    try:
        import os  # noqa: PLC0415 - start-up

        from memd.fsutil import open_regular  # noqa: PLC0415 - start-up
        with os.fdopen(open_regular(path), "rb") as fh:  # a FIFO in its place is refused, never waited on
            raw = fh.read(MAX_PREVIOUS_BYTES)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    prev = parse_summary(raw.decode("utf-8", "replace"))
    if prev.is_empty() and not prev.title:
        return None
    return prev


def write_summary(path: Path, text: str) -> None:
    """Atomically, in private directories: a reader sees the old file or the new, never half.

    Temporary files a killed writer left behind are removed first: the session
    lock is held, so no other writer of this summary can be mid-write.
    """
    for d in (path.parent.parent, path.parent):
        if d.is_symlink():  # a planted link would carry the summary out of the tree
            raise OSError(f"{d}: is a symlink; refusing to write the summary through it")
    ensure_private_dir(path.parent.parent)
    ensure_private_dir(path.parent)
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        try:
            if stale.is_file() and not stale.is_symlink():
                stale.unlink()
        except OSError:
            pass
    atomic_write(path, text)


def run(ctx: JobContext, target: Place, force: bool) -> RunResult:
    if target.kind != "session" or not target.key or not target.session_id:
        return RunResult("failed", f"summary works on sessions, not {target}")
    th = Thresholds.of(ctx.settings)
    if not th.enabled:
        return RunResult("skipped", "session memory is disabled (memory.sessionMemory.enabled)")
    row = _row(ctx, target)
    if row is None:
        return RunResult("skipped", "no such session in the ledger (run `memd scan`)")
    facts = facts_of(row)
    path = ctx.home.summary_file(target.key, target.session_id)
    previous = read_previous(path)
    cursor = cursor_of(ctx, target) if previous is not None else None
    if cursor is not None and facts.offset < cursor.offset:
        cursor = None  # rewritten transcript: read it again from the start, keep the summary
    why = _not_ready(facts, cursor, previous, th, force)
    if why:
        return RunResult("skipped", why)
    start = 0 if cursor is None else cursor.offset
    try:
        span = read_span(row["path"], start, facts.offset, row["format"])
    except OSError as exc:
        return RunResult("skipped", f"transcript unreadable: {exc.strerror or exc}")
    if span.end != facts.offset:
        return RunResult("skipped", "transcript changed since the ledger read it; waiting for the next scan")
    state = _unpaused(ctx, row, span, cursor)
    return _summarise(ctx, target, facts, span, previous, path, state)


def _unpaused(ctx: JobContext, row: Any, span: Span, cursor: Cursor | None) -> Follow:
    """Drop from `span` what was said while memory was paused (SPEC §3.4: nothing after a pause is
    summarised until a resume), by the rule extraction follows; the state to keep in the cursor."""
    state = Follow(False) if cursor is None else Follow(cursor.paused, cursor.pause_uuid)
    words = pause_words(ctx.conn, row["key"], row["session_id"], int(row["generation"]), after=span.start - 1)
    span.pieces = follow(span.pieces, state, words)
    return state


def _not_ready(facts: Facts, cursor: Cursor | None, previous: Summary | None, th: Thresholds, force: bool) -> str:
    """Why this run does nothing, or "" when it should summarise."""
    if facts.offset == 0 or facts.tokens == 0:
        return "not due: nothing to summarise yet"
    if cursor is not None and facts.offset <= cursor.offset:
        return "not due: nothing new since the last summary"
    if force:
        return ""
    ok, reason = summary_due(facts, cursor, th)
    return "" if ok else f"not due: {reason}"


def _summarise(
    ctx: JobContext, target: Place, facts: Facts, span: Span, previous: Summary | None, path: Path, state: Follow
) -> RunResult:
    assert target.session_id and target.key
    talk = conversation_of(span.pieces)
    if not talk and previous is not None:
        # Only records a summary has nothing to say about (meta records, bare commands): move on.
        try:
            text = path.read_text("utf-8", "replace")
        except OSError:
            text = ""
        _advance(ctx, target, facts, text, state)
        return RunResult("ok", "nothing to summarise in the new part; cursor moved", {"offset": facts.offset})
    if not talk:
        # Nothing to say yet (or all of it said while paused): note how far we looked, so the
        # session is not due again until it grows; with no summary.md the next run reads it whole.
        _advance(ctx, target, facts, "", state)
        return RunResult("skipped", "not due: the conversation holds nothing to summarise yet"
                         + (" (memory paused)" if state.paused else ""))  # fmt: skip
    offline = ctx.provider == "offline"
    if offline:
        new = offline_summary(previous, talk, target.session_id)
    else:
        try:
            new = model_summary(ctx, previous, talk, target.session_id)
        except EmptyAnswer as exc:
            ctx.log.warning("summary.rejected", reason=str(exc))
            return RunResult("failed", str(exc))
    final = finish(new, redact)
    footer = f"{FOOTER_PREFIX} · updated {iso(ctx.now())} · transcript bytes 0–{facts.offset} -->"
    text = render_summary(final, footer)
    write_summary(path, text)
    _advance(ctx, target, facts, text, state)
    ctx.log.info(
        "summary.written", path=str(path), chars=len(text), offset=facts.offset, tokens=facts.tokens,
        provider="offline" if offline else "model", update=previous is not None,
    )  # fmt: skip
    return RunResult(
        "ok", "updated" if previous is not None else "first summary",
        {"offset": facts.offset, "chars": len(text), "provider": "offline" if offline else "model"},
    )  # fmt: skip


def _advance(ctx: JobContext, target: Place, facts: Facts, text: str, state: Follow) -> None:
    """The cursor rule: called only once summary.md is durable."""
    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    cur = Cursor(facts.offset, facts.tokens, facts.tool_calls, sha, state.paused, state.last_uuid)
    set_cursor(ctx.conn, NAME, str(target), cur.as_value(), iso(ctx.now()))
