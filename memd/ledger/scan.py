"""One pass over the transcripts: ingest whatever is new in every session (`memd scan`,
and before `memd sessions`, `pause`, `run-now` and `demo`).

A big first read (a new install over a full home) is spread over worker processes;
the ledger's commits re-check the offsets they started from, so workers (and a running
daemon) never count a span twice.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
from typing import TYPE_CHECKING, Any

import orjson

from memd import state
from memd.clock import iso, system_clock
from memd.collector import paused
from memd.ledger import files as ledgerfiles
from memd.ledger import store as ledger
from memd.ledger.commit import FileProblem

if TYPE_CHECKING:  # pragma: no cover - typing only
    from collections.abc import Callable

    from memd.discovery import SessionFile
    from memd.tree import Home

PARALLEL_MIN_BYTES = 64 << 20
BAR_MIN_BYTES = 32 << 20


class DeferredLog:
    """A logger made by `setup` on its first event: a scan with nothing to warn about never sets
    logging up, so `memd scan` does not import structlog (and asyncio with it) to read transcripts."""

    def __init__(self, setup: Callable[[], Any]) -> None:
        self._setup = setup
        self._log: Any = None

    def __getattr__(self, attr: str) -> Any:
        if self._log is None:
            self._log = self._setup()
        return getattr(self._log, attr)


def scan_home(home: Home, *, key: str | None = None, progress: bool = False, log: Any = None) -> dict[str, Any]:
    """Ingest whatever is new in every session (or one project's); returns totals."""
    conn = state.connect(home.state_db)
    try:
        with paused():  # the fold makes no cycles: its records are untracked msgspec structs
            return _scan(conn, home, key, progress, log)
    finally:
        conn.close()


def _scan(conn: Any, home: Home, key: str | None, progress: bool, log: Any) -> dict[str, Any]:
    totals: dict[str, Any] = {"sessions": 0, "read": 0, "bytes": 0, "records": 0, "problems": 0}
    roots = _roots(home)
    found: list[Any] = []
    more = _outside(conn, home, roots)
    while True:  # a session just read may name a project with sessions of its own: one more pass
        found += more
        read = totals["read"]
        _ingest_pass(conn, home, ledgerfiles.stale_sessions(conn, home, key, outside=more), totals,
                     progress=progress, log=log)  # fmt: skip
        if totals["read"] == read:
            break  # nothing new was read: no project became known
        more = [ps for ps in _outside(conn, home, roots) if ps not in found]
        if not more:
            break
    q = "SELECT COUNT(*) FROM sessions WHERE is_subagent=0" + (" AND key=?" if key else "")
    totals["sessions"] = conn.execute(q, (key,) if key else ()).fetchone()[0]
    return totals


def _ingest_pass(conn: Any, home: Home, todo: list[SessionFile], totals: dict[str, Any], *, progress: bool,
                 log: Any) -> None:  # fmt: skip
    sizes = [_size(sf) for sf in todo]
    total = sum(sizes)
    if total >= ROOMY_HEAP_BYTES:
        roomy_heap()
    bar = _bar(total) if progress and todo else None
    workers = _workers(todo, total)
    on_batch = None if bar is None else bar.update
    results = (
        _ingest_parallel(home, todo, sizes, workers, log, on_batch, known=ledger.known_sessions(conn), conn=conn)
        if workers > 1
        else ledger.ingest_many(conn, todo, iso(system_clock()), log)
    )
    for size, r in zip(sizes, results):
        totals["read"] += 1
        totals["bytes"] += r.bytes_read
        totals["records"] += r.records
        totals["problems"] += len(r.problems)
        if bar is not None and workers == 1:
            bar.update(size)
    if bar is not None:
        bar.finish()


ROOMY_HEAP_BYTES = 32 << 20  # a read this big keeps its freed heap (`roomy_heap`)
_ROOMY_BLOCK = 8 << 20


def roomy_heap() -> None:
    """Let glibc's malloc keep the memory a long read frees and takes again, instead of returning it
    to the kernel and faulting it back in page by page.

    Each chunk a reader reads (`memd.transcripts.lines.CHUNK`, under the mmap threshold) and what a
    batch folds come from the top of the heap; freed, they leave more than glibc's trim threshold
    (128 KiB) free at the top, which it gives back with `brk`, and the next chunk faults the pages
    in again: about 20,000 page faults over a 500 MB first scan, where the plain orjson loop takes
    2,400. Freeing one block over the mmap threshold raises both thresholds for the rest of the
    process (mallopt(3), "dynamic mmap threshold"): the mmap threshold to the block's size and the
    trim threshold to twice that, so at most 16 MiB more stays mapped. `bytes(n)` is calloc'd and
    mapped fresh, so making it touches no page. Elsewhere than glibc this is one allocation."""
    block = bytes(_ROOMY_BLOCK)
    del block


def summary_line(totals: dict[str, Any]) -> str:
    """`memd scan`'s line without `--json`."""
    return (f"scanned {totals['sessions']} sessions: {totals['read']} with new bytes, "
            f"{totals['bytes'] / 1e6:.1f} MB, {totals['records']} records, {totals['problems']} problems")  # fmt: skip


def _roots(home: Home) -> list[str]:
    from memd.settings import load  # noqa: PLC0415 - start-up

    return list(load(home.settings_file).memd.roots)


def _outside(conn: Any, home: Home, roots: list[str]) -> list[Any]:
    """MewCode projects' own sessions directories (`memd.ledger.outside`), from `memd.roots` and the
    projects the ledger knows."""
    from memd.ledger import outside  # noqa: PLC0415 - start-up

    return outside.find(conn, home, roots)


def _workers(todo: list[SessionFile], total: int) -> int:
    """A big first read (`total` bytes to read) uses every core (up to 4); small ones stay in-process."""
    forced = os.environ.get("MEMD_SCAN_WORKERS", "")
    if forced.isdigit():  # for tests and for users who want the first read on one core
        return max(1, min(int(forced), len(todo)))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cores < 2 or len(todo) < 4 or total < PARALLEL_MIN_BYTES:
        return 1
    return min(cores, 4)


WORKER_BATCH_BYTES = 16 << 20  # a worker commits once per this much to read


def _ingest_batch(home: Home, sfs: list[SessionFile], turn: Any = None,
                  known: set[tuple[str, str]] | None = None) -> list[ledger.IngestResult]:  # fmt: skip
    """A worker ingests a batch of sessions with its own connection (kept for its next batch), its
    write transactions in turn with the other workers' (`turn`); `known`, the sessions with a row
    when the scan began, as the parent found them (`ledger.ingest_many`)."""
    conn = _WORKER_CONN.get(str(home.state_db))
    if conn is None:
        conn = _WORKER_CONN[str(home.state_db)] = state.connect(home.state_db)
        conn.execute("PRAGMA wal_autocheckpoint=0")  # the parent checkpoints (`_ingest_parallel`)
    return list(ledger.ingest_many(conn, sfs, iso(system_clock()), turn=turn, known=known))


_WORKER_CONN: dict[str, Any] = {}


def _encode_results(results: list[ledger.IngestResult]) -> bytes:
    """A batch's results on their way from a worker: orjson writes dataclasses as they are."""
    return orjson.dumps(results)


def _decode_results(data: bytes) -> list[ledger.IngestResult]:
    out = []
    for d in orjson.loads(data):
        d["problems"] = [FileProblem(**p) for p in d["problems"]]
        out.append(ledger.IngestResult(**d))
    return out


CHECKPOINT_BYTES = 16 << 20  # a parallel scan's parent checkpoints after this much read (`_ingest_parallel`)
SESSION_COST_BYTES = 64 << 10  # a session's reading beyond its bytes (opens, fingerprint, rows): as many bytes' fold
MIN_BATCH_BYTES = 1 << 20  # the last batches are no smaller: each is a transaction and a trip through the pool


def _batches(sizes: list[int], workers: int) -> list[list[int]]:
    """Indexes of the sessions of `sizes` (bytes each), biggest first, in batches whose cost (bytes,
    plus SESSION_COST_BYTES a session) is a share of what is left to hand out: 1/(2·workers) of it,
    at most WORKER_BATCH_BYTES and at least MIN_BATCH_BYTES. Early batches are big (a worker
    commits once per batch, not once per session) and the last ones small, so the workers finish
    together: with a fixed share the last batch held hundreds of small sessions, read by one worker
    while the other waited (about 25 ms of a 506 MB first scan's 0.65 s)."""
    cost = [n + SESSION_COST_BYTES for n in sizes]
    left = sum(cost)
    out: list[list[int]] = []
    cur: list[int] = []
    total = target = 0
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        if not cur:
            target = min(WORKER_BATCH_BYTES, max(MIN_BATCH_BYTES, left // (2 * workers)))
        cur.append(i)
        total += cost[i]
        left -= cost[i]
        if total >= target:
            out.append(cur)
            cur, total = [], 0
    if cur:
        out.append(cur)
    return out


def _ingest_parallel(home: Home, todo: list[SessionFile], sizes: list[int], workers: int, log: Any,
                     on_batch: Callable[[int], None] | None = None,
                     known: set[tuple[str, str]] | None = None, conn: Any = None) -> list[ledger.IngestResult]:  # fmt: skip
    """Sessions spread over `workers` forked processes (`memd.ledger.workers`), in batches, biggest
    first; `on_batch(bytes)` as each batch is done (the progress bar), whatever the order they
    finish in. `known` (the sessions with a row, asked once before the fork) goes to every batch:
    each session is in one batch only, so a row another worker makes meanwhile is never one of
    this batch's, and a row another process makes is met by the commit (`commit.Retry`).

    The workers do not checkpoint the write-ahead log (SQLite's automatic checkpoint ran in the
    committing worker, inside its turn, copying pages and syncing twice while the other waited);
    the parent, idle meanwhile, checkpoints on its connection `conn` (PASSIVE: it waits for no
    reader or writer) after each CHECKPOINT_BYTES of results, which keeps the log as short as
    before."""
    from memd.ledger import workers as forked  # noqa: PLC0415 - start-up: only for a parallel first scan

    batches = _batches(sizes, workers)
    done: list[Any] = [None] * len(batches)

    turns = forked.Turns()

    def work(n: int) -> list[ledger.IngestResult]:
        return _ingest_batch(home, [todo[i] for i in batches[n]], turns, known)

    def meanwhile() -> None:  # the first transcript of each key: what the scan's next `_outside` reads
        from memd.ledger import outside  # noqa: PLC0415 - start-up

        first: dict[str, str] = {}
        for sf in todo:
            if sf.key not in first or sf.main < first[sf.key]:
                first[sf.key] = sf.main
        outside.learn_cwds(list(first.values()))

    unchecked = 0  # bytes of results since the parent's last checkpoint
    try:
        for n, results in forked.run(len(batches), workers, work, _encode_results, _decode_results, meanwhile):
            done[n] = results
            size = sum(sizes[i] for i in batches[n])
            if on_batch is not None:
                on_batch(size)
            unchecked += size
            if conn is not None and unchecked >= CHECKPOINT_BYTES:
                _checkpoint(conn)
                unchecked = 0
    finally:
        turns.close()
    out: list[Any] = [None] * len(todo)
    for batch, results in zip(batches, done):
        for i, r in zip(batch, results):
            out[i] = r
            if log is not None:
                for pr in r.problems[:5]:
                    log.warning("transcript.line_skipped", file=pr.path, line=pr.line, reason=pr.reason)
    return out


def _checkpoint(conn: Any) -> None:
    """Copy what the log holds into the database, waiting for no one. A checkpoint that fails leaves the
    log longer, nothing lost: like SQLite's automatic one, it does not fail the scan."""
    with contextlib.suppress(sqlite3.Error):
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")


def _size(sf: SessionFile) -> int:
    """The session's bytes, by the stats discovery took (`SessionFile.stats`; a file without one is
    asked): what decides workers, batches and the bar, not what is read."""
    total = 0
    for p in sf.paths():
        st = sf.stats.get(p)
        if st is None:
            with contextlib.suppress(OSError):
                st = os.stat(p)
        if st is not None:
            total += st.st_size
    return total


def _bar(total: int) -> Any:
    """A progress bar on stderr for `total` bytes, only on a terminal and only when there is much to read."""
    if not sys.stderr.isatty():
        return None
    if total < BAR_MIN_BYTES:
        return None
    from memd.ledger.progress import ScanBar  # noqa: PLC0415 - start-up: only for a long first scan

    return ScanBar(total)
