"""Targets and due-ness: which scopes a dream works on and when one is due (SPEC §5).

Both thresholds must hold: `minHours` since the scope's last consolidation and
`minSessions` sessions touched since. The last consolidation (and the last
failure, for the back-off) is kept in the cursors table under job "dream".

Times are clamped to now (issue 16): a last consolidation or failure recorded in
the future (a clock that was wrong, a hand edit: `2099-…`) would keep every
dream of the scope waiting until then, so it is taken as now, and kept as now
where the database can be written (minHours then count from when it was found);
a session's time is never later than when memd read it (the ledger's
`updated_at`), so a future-dated transcript counts once, not after every
consolidation; a future-dated memory file starts the count now.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memd.clock import iso, parse_iso
from memd.job.context import JobContext, get_cursor, set_cursor
from memd.locks import Held, acquire
from memd.memory.names import is_candidate_name
from memd.settings import Settings
from memd.tree import Place

NAME = "dream"  # the job's name (`jobs.dream.NAME`): its cursors and model calls are filed under it
RETRY_HOURS = 6.0


class DreamLock(Place):
    """The lock only dreams take: at most one dream per memory scope at a time, held for the whole run.

    A `Place` of the scope it guards, so `memd.locks` takes it like any other
    (bounded wait, `LockBusy`, symlink refusal), but with its own file
    (`dream.<scope's lock file>`) and name (`dream:project:<key>`), so no
    other writer ever waits on it. Never equal to the scope's own Place.
    Order: a dream takes it first and the scope's lock after (`scope_lock`);
    nothing that holds a scope lock ever waits for a dream lock, so the two
    can never deadlock.
    """

    @property
    def scope(self) -> Place:
        """The memory scope this lock guards (whose own lock every writer takes)."""
        return Place(self.kind, self.key, self.session_id)

    @property
    def lock_name(self) -> str:
        return f"dream.{self.scope.lock_name}"

    def __str__(self) -> str:
        return f"dream:{self.scope}"


def scopes(target: Place) -> list[Place]:
    """What the runner holds for the whole run: the scope's dream lock, not its memory lock.

    Decided under no memory lock, the model called outside it, applied under
    the scope's lock with a re-check (`scope_lock`, `jobs.dream.runner`): an
    extraction, a `memd remember` or an index run never waits for a model.
    """
    return [DreamLock("global") if target.kind == "global" else DreamLock("project", target.key or "")]


@contextmanager
def scope_lock(ctx: JobContext, target: Place) -> Iterator[Held]:
    """The memory scope's own lock, which every writer of the directory takes; bounded like
    any job's wait (`memd.lockTimeoutSeconds`). Busy past it: `LockBusy`, the run is deferred."""
    place = Place.global_() if target.kind == "global" else Place.project(target.key or "")
    with acquire(ctx.home, [place], timeout=float(ctx.settings.memd.lock_timeout_seconds)) as held:
        yield held


def targets(ctx: JobContext) -> list[Place]:
    from memd.discovery import list_memory_dirs  # noqa: PLC0415 - start-up
    return [Place("global") if s == "global" else Place("project", k) for s, k, _p in list_memory_dirs(ctx.home)]


def scope_ref(target: Place) -> Place:
    if target.kind == "global":
        return Place("global")
    if target.kind == "project" and target.key:
        return Place("project", target.key)
    raise ValueError(f"dream works on a memory scope, not {target}")


def dream_due(
    hours_since: float | None,
    sessions_since: int,
    min_hours: float,
    min_sessions: int,
    enabled: bool,
    hours_since_failure: float | None = None,
) -> tuple[bool, str]:
    """Pure: both thresholds must hold (§5); `hours_since` None means nothing to consolidate yet.

    A run that failed or was refused since the last consolidation waits
    `min(RETRY_HOURS, min_hours)` before the next try.
    """
    if not enabled:
        return False, "dream disabled"
    if hours_since is None:
        return False, "no memories to consolidate"
    if hours_since < min_hours:
        return False, f"{hours_since:.1f}/{min_hours:g} hours since the last consolidation"
    if sessions_since < min_sessions:
        return False, f"{sessions_since}/{min_sessions} sessions since the last consolidation"
    wait = min(RETRY_HOURS, float(min_hours))
    if hours_since_failure is not None and hours_since_failure < wait:
        return False, f"last try failed {hours_since_failure:.1f} h ago; retried after {wait:g} h"
    return True, f"{hours_since:.1f} hours and {sessions_since} sessions since the last consolidation"


@dataclass(frozen=True)
class Baseline:
    """Where a scope's counting starts, and whether it is a real consolidation."""

    at: datetime | None
    consolidated: bool
    failed_at: datetime | None = None
    run: str | None = None


def _cursor(ctx: JobContext, target: Place) -> dict[str, Any]:
    value = get_cursor(ctx.conn, NAME, str(target))
    return value if isinstance(value, dict) else {}


def _when(value: Any) -> datetime | None:
    return parse_iso(value) if isinstance(value, str) else None


def oldest_memory_mtime(directory: Path) -> float | None:
    """The mtime of the oldest memory file (stat only, no parsing): a never-dreamed scope's baseline."""

    oldest: float | None = None
    try:
        with os.scandir(directory) as it:
            for e in it:
                if not is_candidate_name(e.name):
                    continue
                if not e.is_file(follow_symlinks=False):
                    continue
                t = e.stat(follow_symlinks=False).st_mtime
                oldest = t if oldest is None else min(oldest, t)
    except OSError:
        return None
    return oldest


def oldest_in(stats: Mapping[str, os.stat_result]) -> float | None:
    """`oldest_memory_mtime` from lstats taken already (the dream's scan takes one an entry)."""
    return min((st.st_mtime for name, st in stats.items() if is_candidate_name(name) and stat.S_ISREG(st.st_mode)),
               default=None)  # fmt: skip


def baseline_of(ctx: JobContext, target: Place, oldest: Callable[[], float | None] | None = None) -> Baseline:
    """Where `target`'s count starts (see `Baseline`); `oldest` gives the oldest memory's mtime
    when the caller has the directory's stats already (else the directory is listed)."""
    cur = _cursor(ctx, target)
    now = ctx.now()
    last = _when(cur.get("last"))
    failed = _when(cur.get("failed_at"))
    if (last is not None and last > now) or (failed is not None and failed > now):
        last, failed = _clamp(ctx, target, cur, now, last, failed)
    if failed is not None and last is not None and failed <= last:
        failed = None
    run_id = cur.get("run") if isinstance(cur.get("run"), str) else None
    if last is not None:
        return Baseline(last, True, failed, run_id)
    first = oldest() if oldest is not None else oldest_memory_mtime(scope_ref(target).memory_dir(ctx.home))
    at = None if first is None else datetime.fromtimestamp(first, UTC)
    if at is not None and at > now:
        at = _first_seen(ctx, target, cur, now, at)
    return Baseline(at, False, failed, run_id)


def _first_seen(ctx: JobContext, target: Place, cur: dict[str, Any], now: datetime, dated: datetime) -> datetime:
    """A never-dreamed scope whose every memory is dated in the future (2099): its baseline is when that
    was first found, kept in the cursor (`first_seen`), so minHours count from then. Taking "now" at
    each look instead would keep the scope at 0 hours, never due."""
    seen = _when(cur.get("first_seen"))
    if seen is not None and seen <= now:
        return seen
    import sqlite3  # noqa: PLC0415 - start-up
    try:
        set_cursor(ctx.conn, NAME, str(target), {**cur, "first_seen": iso(now),
                                                  "clamped_from": {"memory_mtime": iso(dated)}}, iso(now))  # fmt: skip
        ctx.log.warning("dream.time_clamped", target=str(target), was={"memory_mtime": iso(dated)}, now=iso(now))
    except sqlite3.Error:
        pass  # a read-only look (`memd status`): clamped for this answer only
    return now


def _clamp(ctx: JobContext, target: Place, cur: dict[str, Any], now: datetime, last: datetime | None,
           failed: datetime | None) -> tuple[datetime | None, datetime | None]:  # fmt: skip
    """A last consolidation or failure in the future, taken as now and kept as now (once: the
    count of minHours starts when the bad time was found, instead of waiting until 2099)."""

    was = {k: cur.get(k) for k in ("last", "failed_at") if cur.get(k) is not None}
    if last is not None and last > now:
        last, cur = now, {**cur, "last": iso(now)}
    if failed is not None and failed > now:
        failed, cur = now, {**cur, "failed_at": iso(now)}
    import sqlite3  # noqa: PLC0415 - start-up
    try:
        set_cursor(ctx.conn, NAME, str(target), {**cur, "clamped_from": was}, iso(now))
        ctx.log.warning("dream.time_clamped", target=str(target), was=was, now=iso(now))
    except sqlite3.Error:
        pass  # a read-only look (`memd status`): clamped for this answer only
    return last, failed


def _hours(now: datetime, then: datetime | None) -> float | None:
    return None if then is None else max(0.0, (now - then).total_seconds() / 3600)


def epoch(ts: Any) -> float | None:
    if isinstance(ts, str):
        dt = parse_iso(ts)
        if dt is not None:
            return dt.timestamp()
    try:
        x = float(ts)
    except (TypeError, ValueError):
        return None
    return x / 1000 if x > 1e11 else x  # epoch milliseconds


_SESSIONS_SINCE = (
    "SELECT key, last_ts, updated_at FROM sessions WHERE is_subagent=0 AND human_turns>0 AND last_ts IS NOT NULL "
    "AND (last_ts >= ? OR last_ts NOT LIKE '____-__-__T%Z')"
)


def sessions_since(conn: Any, baselines: dict[Place, datetime]) -> dict[Place, int]:
    """Sessions touched after each target's baseline, from one query.

    The SQL prefix test (`last_ts >= <baseline to the second>`) returns a
    superset for ISO timestamps ending in Z; other forms are always returned;
    the exact comparison is done on parsed times. Rows are few unless a
    baseline is old, and even 10,000 rows take milliseconds. A session's time is
    clamped to when memd last read it (`updated_at`): a transcript dated in the
    future must not count as new after every consolidation.
    """
    if not baselines:
        return {}
    lo = min(baselines.values())
    out = {t: 0 for t in baselines}
    glob = [(t, b.timestamp()) for t, b in baselines.items() if t.kind == "global"]
    proj = {t.key: (t, b.timestamp()) for t, b in baselines.items() if t.kind == "project"}
    cur = conn.cursor()
    cur.row_factory = None
    for key, ts, seen in cur.execute(_SESSIONS_SINCE, (iso(lo)[:19],)):
        x = epoch(ts)
        if x is None:
            continue
        read = epoch(seen)
        if read is not None and x > read:
            x = read
        for t, b in glob:
            if x > b:
                out[t] += 1
        p = proj.get(key)
        if p is not None and x > p[1]:
            out[p[0]] += 1
    return out


INDEX_MAX_LINES = 200  # the index budget agents read (memd.index.render: about 200 lines / 25 KB)
INDEX_MAX_BYTES = 25_000


@dataclass(frozen=True)
class IndexSize:
    """A scope's `MEMORY.md` as an agent loads it: lines and UTF-8 bytes."""

    lines: int
    size: int

    @property
    def over(self) -> bool:
        return self.lines > INDEX_MAX_LINES or self.size > INDEX_MAX_BYTES

    def describe(self) -> str:
        return f"{self.lines} lines, {self.size / 1000:.1f} KB"


def index_size(directory: Path) -> IndexSize | None:
    """The size of the directory's `MEMORY.md` (None: absent, a symlink, unreadable)."""
    idx = directory / "MEMORY.md"
    try:
        if idx.is_symlink() or not idx.is_file():
            return None
        data = idx.read_bytes()
    except OSError:
        return None
    return IndexSize(data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1), len(data))


def index_due(hours_since: float | None, size: IndexSize | None, min_hours: float,
              hours_since_failure: float | None = None) -> tuple[bool, str] | None:  # fmt: skip
    """Pure: a scope whose `MEMORY.md` passes 200 lines or 25 KB is due whatever its session count,
    still at most once per `minHours` and with the failure back-off (`dream_due` with no session
    threshold). None when the index is within budget (the session rule decides)."""
    if size is None or not size.over:
        return None
    ok, _why = dream_due(hours_since, 0, min_hours, 0, True, hours_since_failure)
    if not ok:
        return None
    return True, (f"MEMORY.md is over budget ({size.describe()}; at most {INDEX_MAX_LINES} lines / "
                  f"{INDEX_MAX_BYTES / 1000:g} KB); {hours_since or 0:.1f} hours since the last consolidation")


@dataclass(frozen=True)
class Thresholds:
    """The settings that make a scope due for a dream."""

    enabled: bool
    min_hours: float
    min_sessions: int

    @classmethod
    def of(cls, settings: Settings) -> Thresholds:
        enabled = bool(settings.memory.enabled) and bool(settings.memory.dream.enabled)
        return cls(enabled, float(settings.memory.dream.min_hours), int(settings.memory.dream.min_sessions))


def due_decisions(ctx: JobContext, tgts: Sequence[Place]) -> dict[Place, tuple[bool, str]]:
    """Gather the facts for each target (cheap first: a scope short of hours needs no session count)."""
    th = Thresholds.of(ctx.settings)
    if not th.enabled:
        return {t: (False, "dream disabled") for t in tgts}
    now = ctx.now()
    bases = {t: baseline_of(ctx, t) for t in tgts}
    ready = {t: b.at for t, b in bases.items() if b.at is not None and (_hours(now, b.at) or 0.0) >= th.min_hours}
    counts = sessions_since(ctx.conn, {t: at for t, at in ready.items() if at is not None})
    out = {
        t: dream_due(_hours(now, b.at), counts.get(t, 0), th.min_hours, th.min_sessions, True, _hours(now, b.failed_at))
        for t, b in bases.items()
    }
    for t in ready:  # an oversized index asks for a dream whatever the session count (issue 26)
        if not out[t][0]:
            out[t] = index_due(_hours(now, bases[t].at), index_size(scope_ref(t).memory_dir(ctx.home)),
                               th.min_hours, _hours(now, bases[t].failed_at)) or out[t]  # fmt: skip
    return out


def due(ctx: JobContext, only: Place | None = None) -> list[Place]:
    if not Thresholds.of(ctx.settings).enabled:
        return []
    tgts = [only] if only is not None else targets(ctx)
    return [t for t, (ok, _why) in due_decisions(ctx, tgts).items() if ok]


def note_failure(ctx: JobContext, target: Place, reason: str) -> None:
    """Keep the last consolidation; remember the failure so due() backs off (each try costs a call)."""
    cur = _cursor(ctx, target)
    cur.update({"failed_at": iso(ctx.now()), "failure": reason[:300]})
    set_cursor(ctx.conn, NAME, str(target), cur, iso(ctx.now()))


def advance(ctx: JobContext, target: Place, run_id: str | None) -> None:
    """The cursor rule: called once the swap (or the decision that nothing changes) is durable."""
    set_cursor(ctx.conn, NAME, str(target), {"last": iso(ctx.now()), "run": run_id}, iso(ctx.now()))
