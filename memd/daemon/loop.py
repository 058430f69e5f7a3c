"""`memd run`: the long-running daemon.

One main thread owns the ledger connection and the event queue; APScheduler's
thread pool runs jobs, each with its own state connection. Signal handlers only
set flags; the main loop acts on them (DESIGN). The daemon never restarts
itself: the service manager does.

Flow: watcher (inotify/FSEvents via watchdog, or polling) → queue → main loop
ingests the session's new bytes (the first event of a quiet moment at once, a burst in windows:
memd.daemon.batching) → asks the session jobs whether they are due →
schedules `<job>:<target>` once (a second request while it runs is remembered
and re-evaluated after). A periodic due-check covers time-based jobs and retries.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import threading
import time
from datetime import timedelta
from typing import Any

import orjson
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

from memd import settings as settings_mod
from memd import state
from memd.agent.hooks import take_summary_requests
from memd.clock import Clock, iso, system_clock
from memd.daemon import registry
from memd.daemon.batching import gather_seconds, take_batch
from memd.daemon.dispatch import Dispatch
from memd.daemon.hook_server import HookServer
from memd.daemon.lock import DaemonLock
from memd.discovery import ProjectSessions, classify_path, discover_sessions, list_memory_dirs, session_file
from memd.fsutil import ensure_private_dir
from memd.history.snapshots import recover
from memd.job.context import JobContext, make_context, make_llm
from memd.job.runner import run_job
from memd.ledger import files as ledgerfiles
from memd.ledger import outside as ledgeroutside
from memd.ledger import store as ledger
from memd.memory.names import is_candidate_name
from memd.tree import Home, Place
from memd.write.migrate import migrate_memory_keys

SESSION_JOBS: tuple[str, ...] = ("extract", "summary")
DUE_CHECK_SECONDS = 30
SYNC_TICK_SECONDS = 5  # how often the sync job is asked whether it is due (cheap: two small files)
STOP_GRACE_SECONDS = 120
# Workers for jobs that call a model (NEEDS_MODEL: extraction, summaries, dream). A call may hang or
# trickle up to its deadline (`memd.timeoutSeconds`, per attempt): it holds one worker, and the
# dispatch runs one job per `<job>:<target>` at a time, so a slow call delays its own target only while
# the other sessions' jobs take the other workers (issue 21). Jobs that call no model (index, sync)
# have workers of their own, so neither kind waits behind the other.
MODEL_WORKERS = 8
LOCAL_WORKERS = 2
DAEMON_LOCK_TIMEOUT = 2.0
WRITE_EVENTS = frozenset({"created", "modified", "moved", "deleted", "closed"})


def executor_for(job: Any) -> str:
    """The worker pool a job runs on: its own `EXECUTOR` if it names one (sync: "network"), "model"
    for a job that may call a model, else "default"."""
    return str(getattr(job, "EXECUTOR", None) or ("model" if getattr(job, "NEEDS_MODEL", False) else "default"))


def _scope_of(target: Place) -> tuple[str, str | None]:
    """The search database's (scope, project key) of an index target."""
    return ("global", None) if target.kind == "global" else ("project", target.key)


class EventForwarder:
    """A watchdog handler that puts written paths on the daemon's queue (the main loop does the rest).

    Reads (opened, closed_no_write) are memd's own scans: reacting to them would loop.
    Writes, creations, moves and deletions count. Events are not logged: at debug
    level they would be nearly every line (the ingest that follows is logged).
    """

    def __init__(self, events: queue.Queue[tuple[str, Any]]) -> None:
        self.events = events

    def dispatch(self, event: Any) -> None:
        if event.is_directory or event.event_type not in WRITE_EVENTS:
            return
        self.events.put(("path", event.src_path))
        dest = getattr(event, "dest_path", None)
        if dest:
            self.events.put(("path", dest))


class Daemon:
    def __init__(self, home: Home, *, clock: Clock = system_clock, log: Any) -> None:
        self.home = home
        self.clock = clock
        self.log = log
        self.settings = settings_mod.load(home.settings_file)
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.stop_requested = False
        self.reload_requested = False
        self.mu = threading.Lock()
        self.dispatch = Dispatch()
        self.scheduler: Any = None
        self.observer: Any = None
        self.nearest: Any = None  # the nearest-memories socket (memd[semantic]), when the extra is installed
        self.hooks: HookServer | None = None  # the hook socket: answers `memd context|recall --hook` (hook_server)
        self._mem_sig: dict[Place, tuple[Any, ...]] = {}
        self._last_poll = 0.0
        self._last_due = 0.0
        self._last_reconcile = 0.0
        self._last_sync = 0.0
        self._last_file_batch: float | None = None  # monotonic end of the last batch with file events
        self.outside: list[ProjectSessions] = []  # MewCode projects' own sessions directories (each scan)
        self._watched: set[str] = set()
        self._event_filter: Any = None

    # -- signals: flags only ----------------------------------------------------
    def _on_stop(self, signum: int, _frame: Any) -> None:
        if self.stop_requested:
            os._exit(1)  # a second signal: exit at once
        self.stop_requested = True

    def _on_hup(self, _signum: int, _frame: Any) -> None:
        self.reload_requested = True

    def install_signals(self) -> None:
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_hup)

    # -- life -------------------------------------------------------------------
    def run(self) -> int:
        ensure_private_dir(self.home.root)
        ensure_private_dir(self.home.projects)
        self.install_signals()  # before the pid file appears: a stop sent as soon as it exists is a clean stop
        with DaemonLock(self.home):
            self.conn = state.connect(self.home.state_db)
            self._record_settings()
            self._recover_swaps()
            self._migrate_memory_keys()
            self.log.info("daemon.started", pid=os.getpid(), home=str(self.home.root), polling=self._polling())
            self._start_scheduler()
            self._start_nearest()
            self.hooks = HookServer(self.home, self.log)
            self.hooks.start()
            self._start_watcher()
            self.events.put(("scan", None))
            self.events.put(("reconcile", None))
            try:
                self._loop()
            finally:
                self._shutdown()
        return 0

    def _recover_swaps(self) -> None:
        """Finish or roll back a memory-directory swap a crash interrupted, before any job touches memories."""
        try:
            for done in recover(self.home, logger=self.log):
                self.log.warning("dream.recovered", **{k: str(v) for k, v in done.items()})
        except Exception as exc:
            self.log.exception("dream.recovery_failed", reason=str(exc))

    def _migrate_memory_keys(self) -> None:
        """Once per home: memories written under a sub-directory's or worktree's key move to the root's."""
        try:
            migrate_memory_keys(self.home, self.settings, self.conn, self.clock(), self.log)
        except Exception as exc:
            self.log.exception("memory.migration_failed", reason=str(exc))

    def _polling(self) -> bool:
        return bool(self.settings.memd.force_polling) or self.observer is False

    def _record_settings(self) -> None:
        for w in self.settings.warnings:
            self.log.warning("settings.fallback", problem=w)
        state.set_kv(self.conn, "settings_warnings", orjson.dumps(self.settings.warnings).decode())

    def _start_scheduler(self) -> None:

        # APScheduler logs every add/run at INFO; our job.started/job.finished say it once.

        logging.getLogger("apscheduler").setLevel(logging.WARNING)

        self.scheduler = BackgroundScheduler(
            executors={"default": ThreadPoolExecutor(LOCAL_WORKERS), "model": ThreadPoolExecutor(MODEL_WORKERS),
                       "network": ThreadPoolExecutor(1)},  # a slow remote holds up no other job
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 300},
            timezone="UTC",
        )
        self.scheduler.start()

    def _start_nearest(self) -> None:
        """With the memd[semantic] extra: embeddings at index time and queries over the home's socket."""
        from memd.index.embeddings import installed  # noqa: PLC0415 - the extra is optional

        if not installed():
            return
        from memd.daemon.nearest_server import NearestServer  # noqa: PLC0415 - the extra is optional

        self.nearest = NearestServer(self.home, self.log)
        self.nearest.start()

    def _start_watcher(self) -> None:
        if self.settings.memd.force_polling:
            self.observer = False
            return

        # watchdog logs each inotify event at DEBUG: at `logLevel: debug` that was 94 % of the log.
        logging.getLogger("watchdog").setLevel(logging.INFO)
        try:
            from watchdog import events as ev  # noqa: PLC0415 - an unusable watchdog falls back to polling
            from watchdog.observers import Observer  # noqa: PLC0415

            # Only the writes the loop acts on (WRITE_EVENTS): without a filter inotify also reports every
            # open and read-only close in the tree (memd's own read of each append among them), and each
            # passes three watchdog threads only to be dropped by EventForwarder (issue 27).
            writes = [ev.FileModifiedEvent, ev.FileCreatedEvent, ev.FileMovedEvent, ev.FileDeletedEvent,
                      ev.FileClosedEvent]  # fmt: skip
            obs = Observer()
            obs.schedule(EventForwarder(self.events), str(self.home.projects), recursive=True,  # type: ignore[arg-type]
                         event_filter=writes)  # fmt: skip
            ensure_private_dir(self.home.global_memory)
            obs.schedule(EventForwarder(self.events), str(self.home.global_memory), recursive=False,  # type: ignore[arg-type]
                         event_filter=writes)  # fmt: skip
            obs.daemon = True
            obs.start()
            self.observer = obs
            self._event_filter = writes  # for the projects' own sessions directories (`_watch_outside`)
        except Exception as exc:
            self.log.warning("watcher.unavailable", reason=str(exc), fallback="polling")
            self.observer = False

    def _shutdown(self) -> None:
        self.log.info("daemon.stopping")
        if self.scheduler is not None:
            self.scheduler.pause()
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        while time.monotonic() < deadline:
            with self.mu:
                if not self.dispatch.active:
                    break
            time.sleep(0.05)
        if self.observer:
            self.observer.stop()
        if self.nearest is not None:
            self.nearest.stop()
        if self.hooks is not None:
            self.hooks.stop()
        if self.scheduler is not None:
            self.scheduler.shutdown(wait=False)
        with self.mu:
            left = sorted(self.dispatch.active)
        self.conn.close()
        self.log.info("daemon.stopped", unfinished=left)

    # -- main loop --------------------------------------------------------------
    def _loop(self) -> None:
        while not self.stop_requested:
            if self.reload_requested:
                self.reload_requested = False
                self.settings = settings_mod.load(self.home.settings_file)
                self._record_settings()
                if self.hooks is not None:
                    self.hooks.settings_changed()
                self.log.info("settings.reloaded")
                self.events.put(("scan", None))  # `memd.roots` may name new places
            self._periodic()
            try:
                first = self.events.get(timeout=0.25)
            except queue.Empty:
                continue
            batch = take_batch(self.events, first, gather_seconds(time.monotonic(), self._last_file_batch))
            self._handle(batch)
            if any(kind == "path" for kind, _ in batch):  # the periodic ticks are no burst of writes
                self._last_file_batch = time.monotonic()

    def _periodic(self) -> None:
        now = time.monotonic()
        poll_every = float(self.settings.memd.poll_seconds) if self._polling() else float(
            self.settings.memd.reconcile_seconds
        )
        if now - self._last_poll >= poll_every:
            self._last_poll = now
            self.events.put(("scan", None))
            if self._polling():
                self.events.put(("memsig", None))
        if now - self._last_reconcile >= float(self.settings.memd.reconcile_seconds):
            self._last_reconcile = now
            self.events.put(("reconcile", None))
        if now - self._last_due >= DUE_CHECK_SECONDS:
            self._last_due = now
            self.events.put(("due", None))
        if now - self._last_sync >= SYNC_TICK_SECONDS:
            self._last_sync = now
            self.events.put(("sync", None))

    def _handle(self, batch: list[tuple[str, Any]]) -> None:
        sessions: set[tuple[str, str | None]] = set()
        places: set[Place] = set()
        kinds = {k for k, _ in batch}
        for arg in dict.fromkeys(arg for kind, arg in batch if kind == "path"):  # a burst repeats its paths
            pk = classify_path(self.home, arg, self.outside)
            if pk.kind == "transcript" and pk.key:
                sessions.add((pk.key, pk.session_id))
            elif pk.kind == "memory":
                places.add(Place.memory(pk.key))
        for key, sid in sorted(sessions, key=str):
            self._ingest_one(key, sid)
        for place in sorted(places, key=lambda p: p.sort_key):
            self.submit("index", place)
        if "scan" in kinds:
            self._scan_all()
        if "memsig" in kinds:
            self._memory_signatures()
        if "reconcile" in kinds:
            scopes = [Place.memory(mkey) for _scope, mkey, _p in list_memory_dirs(self.home)]
            scopes += [Place.project(ps.key) for ps in self.outside]  # their own `.mewcode/memory/` (recall)
            for place in dict.fromkeys(scopes):
                self.submit("index", place)
        if "due" in kinds:
            self._due_all()
        if "sync" in kinds:  # memd.git with a remote: the sync job, when it is due
            self._due_one("sync")
        for kind, arg in batch:
            if kind == "recheck":
                self._recheck(*arg)

    def _ingest_one(self, key: str, sid: str | None) -> None:
        if sid is None:  # a stray agent file: find its session by listing the project
            for each in discover_sessions(self.home, key):
                if ledgerfiles.needs_read(self.conn, each):
                    self._ingest(each)
            return
        one = session_file(self.home, key, sid, self.outside)
        if one is not None:
            self._ingest(one)

    def _ingest(self, sf: Any) -> None:
        try:
            r = ledger.ingest(self.conn, sf, iso(self.clock()), self.log)
        except Exception as exc:
            self.log.exception("ledger.ingest_failed", file=str(sf.path), reason=str(exc))
            return
        if r.changed or r.reset:
            self.log.debug("ledger.ingested", key=sf.key, session=sf.session_id, bytes=r.bytes_read, records=r.records)
            self._session_due(sf.key, sf.session_id)

    def _scan_all(self) -> None:
        more = self._find_outside()
        seen = set(more)
        while True:  # a session just read may name a project with sessions of its own: one more pass
            todo = ledgerfiles.stale_sessions(self.conn, self.home, outside=more)
            for sf in todo:
                if self.stop_requested:
                    return
                self._ingest(sf)
            if not todo:
                return  # nothing new was read: no project became known
            more = [ps for ps in self._find_outside() if ps not in seen]
            if not more:
                return
            seen.update(more)

    def _find_outside(self) -> list[ProjectSessions]:
        """MewCode projects' own sessions directories now (`memd.ledger.outside`), watched from now on."""
        try:
            self.outside = ledgeroutside.find(self.conn, self.home, self.settings.memd.roots)
        except Exception as exc:  # a bad root never stops the home's own scan
            self.log.exception("discovery.outside_failed", reason=str(exc))
        self._watch_outside()
        return self.outside

    def _watch_outside(self) -> None:
        """Watch each project's own sessions directory once (not recursively): an append there is an
        event like one under the home. Polling mode has no watcher; its scans find the bytes."""
        for ps in self.outside:
            if ps.sessions in self._watched:
                continue
            self._watched.add(ps.sessions)
            self.log.info("discovery.project_sessions", key=ps.key, directory=ps.sessions)
            if self.observer:
                try:
                    self.observer.schedule(EventForwarder(self.events), ps.sessions, recursive=False,
                                           event_filter=self._event_filter)  # fmt: skip
                except Exception as exc:
                    self.log.warning("watcher.unavailable", directory=ps.sessions, reason=str(exc))

    def _memory_signatures(self) -> None:
        """Polling mode: notice hand edits in memory directories by their listing."""
        for _scope, key, path in list_memory_dirs(self.home):
            try:
                sig = tuple(sorted((e.name, e.stat(follow_symlinks=False).st_mtime_ns, e.stat(follow_symlinks=False).st_size)
                                   for e in os.scandir(path) if is_candidate_name(e.name)))  # fmt: skip
            except OSError:
                sig = ()
            place = Place.memory(key)
            if self._mem_sig.get(place) != sig:
                if place in self._mem_sig:
                    self.submit("index", place)
                self._mem_sig[place] = sig

    def _job_ctx(self) -> Any:
        return JobContext(self.home, self.settings, self.conn, self.clock, self.log, llm_factory=make_llm)

    def _session_due(self, key: str, sid: str) -> None:
        ctx = self._job_ctx()
        for name in SESSION_JOBS:
            job = registry.get(name)
            for target in job.due(ctx, only=Place.session(key, sid)):
                self.submit(name, target)

    def _recheck(self, name: str, target: Place) -> None:
        job = registry.get(name)
        if not getattr(job, "HAS_THRESHOLDS", True) or target in job.due(self._job_ctx(), only=target):
            self.submit(name, target)

    def _due_one(self, name: str) -> None:
        job = registry.get(name)
        try:
            targets = job.due(self._job_ctx())
        except Exception as exc:
            self.log.exception("job.due_failed", job=name, reason=str(exc))
            return
        for target in targets:
            self.submit(name, target)

    def _due_all(self) -> None:
        swept = state.sweep_interrupted(self.conn, iso(self.clock()))
        if swept:
            self.log.warning("runs.interrupted", count=swept)
        ctx = self._job_ctx()
        for place in take_summary_requests(self.conn):  # PreCompact hooks ask for these (memd.agent.hooks)
            self.submit("summary", place, force=True)
        for job in registry.all_jobs():
            try:
                targets = job.due(ctx)
            except Exception as exc:
                self.log.exception("job.due_failed", job=job.NAME, reason=str(exc))
                continue
            for target in targets:
                self.submit(job.NAME, target)

    # -- running jobs -----------------------------------------------------------
    def _recheck_later(self, name: str, target: Place, delay: float) -> None:
        """A failed or deferred run is looked at again when its wait is over, not at the next sweep."""

        when = self.clock() + timedelta(seconds=delay + 0.05)
        self.scheduler.add_job(self.events.put, "date", run_date=when, args=(("recheck", (name, target)),),
                               id=f"recheck:{name}:{target}", replace_existing=True)  # fmt: skip

    def _index_held(self, place: Place, seconds: float) -> None:
        """A job held a project's MEMORY.md for an agent at work (memd.index.hold): index it again
        once the agent has been quiet that long (one pending recheck per scope)."""
        if not self.stop_requested:
            self._recheck_later("index", place, seconds)

    def submit(self, name: str, target: Place, force: bool = False) -> bool:
        """Schedule `<job>:<target>` unless it is already scheduled, running or backing off."""
        jid = f"{name}:{target}"
        with self.mu:
            if self.stop_requested or not self.dispatch.admit(jid, time.monotonic()):
                return False
        executor = executor_for(registry.get(name))
        self.scheduler.add_job(self._execute, args=(name, target, force), id=jid, replace_existing=True,
                               executor=executor)  # fmt: skip
        return True

    def _execute(self, name: str, target: Place, force: bool) -> None:
        jid = f"{name}:{target}"
        result = None
        try:
            ctx = make_context(self.home, self.settings, log=self.log, now=self.clock,
                               should_stop=lambda: self.stop_requested, hold_index=self._index_held)  # fmt: skip
            try:
                result = run_job(ctx, registry.get(name), target, force=force, lock_timeout=DAEMON_LOCK_TIMEOUT)
            finally:
                ctx.conn.close()
        except Exception as exc:
            self.log.exception("job.crashed", job=name, target=str(target), reason=str(exc))
        with self.mu:
            outcome = None if result is None else result.outcome
            reason = "" if result is None else result.reason
            nxt = self.dispatch.finished(jid, outcome, reason, time.monotonic(),
                                         float(self.settings.memd.retry_seconds))  # fmt: skip
        if outcome in (None, "failed"):
            self.log.info("job.retry_scheduled", job=name, target=str(target), failures=nxt.failures,
                          in_seconds=nxt.retry_in)  # fmt: skip
        if nxt.retry_in is not None and not self.stop_requested:
            self._recheck_later(name, target, nxt.retry_in)
        if name == "index" and outcome == "ok" and self.nearest is not None:  # memd[semantic]: outside the lock
            self.nearest.embed_soon(*_scope_of(target))
        if nxt.again and name in SESSION_JOBS and target.kind == "session":
            self.events.put(("path", str(self.home.project_dir(target.key or "") / f"{target.session_id}.jsonl")))


