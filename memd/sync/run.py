"""`memd sync`: the memory repository (`memd.git.commits`) fetched, merged and pushed with `memd.sync.remote`.

Git is the engine; memd only decides what a merge of *memories* means. One sync:

1. under the git lock: fetch the remote (`origin`, any git URL);
2. under the scope locks (global, then every local project) and the git lock:
   commit what is not committed yet (hand edits memd has not seen), then merge
   the remote's `main` into ours, file by file, and write what changed into the
   live memory directories through the history (one undoable write run per
   scope, job `sync`), refreshing their indexes;
3. under the git lock: push `main`. Never forced: a push the remote refuses
   (someone pushed first) goes back to 1, at most `MAX_ROUNDS` times.

The merge is per file, never per line, so there is never a conflict marker in a
memory file (`merge_entries`): a file changed on one side only takes that side;
changed on both sides, ours stays and theirs is kept beside it as
`<name>.conflict-<host>.md`; created on both sides with different content,
theirs is renamed `<name>-<host>.md`; changed on one side and deleted on the
other, the changed file stays. `manifest.json` is merged as a union. Both
versions of a conflict stay visible (`memd status`, `memd history`, the index's
duplicate-name warning) until the user, a merge proposal or dream merges them.

A file the local directory holds in another version than our last commit
(refused for a secret, or edited while we merged) is never overwritten: the
incoming version lands beside it as a conflict copy.

Unreachable remote: the sync fails with one line, local work goes on (commits
keep being made), and the daemon retries with backoff (15 s doubling up to the
interval); `memd status` shows the error, the next try and how far each side is
ahead. State for status lives in `memd/sync.json`.

The daemon runs it as the `sync` job (`jobs/sync.py`): the same dispatch, locks and `runs` table as
every other job. Where the code is: this module runs a sync (fetch, push, rounds), records it for
`memd status` and backs off; `memd.sync.integrate` merges the fetched `main` into
ours and writes the result into the live directories; `memd.sync.merge` holds the
merge rules above as pure functions.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memd.errors import MemdError
from memd.fsutil import atomic_write
from memd.git.plumbing import REF, REMOTE, REMOTE_REF, Git, GitError, SyncError, SyncNotConfigured
from memd.job.backoff import backoff_seconds
from memd.logs.lazy import lazy_logger
from memd.settings import Settings
from memd.tree import Home, Place

if TYPE_CHECKING:
    import subprocess

    from memd.git.repo import Repo
    from memd.git.worktree import IndexHold

log = lazy_logger("memd.sync")

STATE_FILE = "sync.json"
MAX_ROUNDS = 4
AFTER_WRITE_SECONDS = 10.0
BACKOFF_BASE_SECONDS = 15.0
BACKOFF_MAX_SECONDS = 3600.0
NETWORK_TIMEOUT_SECONDS = 300.0  # a whole fetch or push, however busy
NETWORK_IDLE_SECONDS = 30.0  # a remote that sends nothing for this long (git://, ssh or http) is given up
# git's own bounds where it has one: http's low-speed limit (bytes/s over seconds).
_NETWORK_CONFIG = ("-c", "http.lowSpeedLimit=1", "-c", f"http.lowSpeedTime={int(NETWORK_IDLE_SECONDS)}")






# --------------------------------------------------------------------------- state for status and the daemon


def state_path(home: Home) -> Path:
    return home.memd_dir / STATE_FILE


def read_state(home: Home) -> dict[str, Any]:
    try:
        data = json.loads(state_path(home).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_state(home: Home, data: dict[str, Any]) -> None:
    from memd.fsutil import ensure_private_dir  # noqa: PLC0415 - start-up
    ensure_private_dir(home.memd_dir)
    atomic_write(state_path(home), json.dumps(data, indent=1, sort_keys=True) + "\n")


def retry_after(failures: int, every_s: float) -> float:
    """15 s, 30 s, 60 s… after consecutive failures, never past the interval (nor an hour): memd's
    one backoff rule (`memd.job.backoff`) with sync's base and cap."""
    return backoff_seconds(failures, BACKOFF_BASE_SECONDS, max(BACKOFF_BASE_SECONDS, min(BACKOFF_MAX_SECONDS, every_s)))


def due(now: float, state: dict[str, Any], every_s: float, ahead: bool) -> bool:
    """Whether the daemon syncs now: never inside a backoff; at start; every interval; soon after a write."""
    if now < float(state.get("next_try_ts") or 0):
        return False
    last = state.get("last_attempt_ts")
    if not isinstance(last, (int, float)):
        return True
    if now - last >= every_s:
        return True
    return ahead and now - last >= AFTER_WRITE_SECONDS


def _read_ref(git_dir: Path, ref: str) -> str | None:
    """A ref's value without a git process (the daemon asks every few seconds)."""
    try:
        return (git_dir / ref).read_text(encoding="ascii").strip() or None
    except OSError:
        pass
    try:
        for line in (git_dir / "packed-refs").read_text(encoding="utf-8").splitlines():
            sha, _, name = line.partition(" ")
            if name == ref:
                return sha
    except OSError:
        pass
    return None


# --------------------------------------------------------------------------- one sync


TEST_INTERVAL_ENV = "MEMD_TEST_SYNC_EVERY_SECONDS"  # tests only: an interval under the settings' one-minute floor


def settings_of(settings: Settings) -> tuple[bool, str, float, float]:
    """(git on, remote, interval in seconds, lock timeout)."""
    every_s = 60.0 * float(settings.memd.sync.every_minutes)
    if os.environ.get(TEST_INTERVAL_ENV, "").isdigit():
        every_s = float(os.environ[TEST_INTERVAL_ENV])
    return (bool(settings.memd.git), str(settings.memd.sync.remote or ""), every_s,
            float(settings.memd.lock_timeout_seconds))  # fmt: skip


def due_now(home: Home, settings: Settings, now: float) -> bool:
    """Whether a sync is due (the sync job's `due`): memd.git on with a remote, and `due` says so.
    Cheap (two small files, no git process): the daemon asks every few seconds."""
    on, remote, every_s, _t = settings_of(settings)
    if not on or not remote:
        return False
    head = _read_ref(home.memd_dir / "git", REF)
    st = read_state(home)
    return due(now, st, every_s, ahead=head is not None and head != st.get("pushed"))


def run(home: Home, settings: Settings, *, host: str | None = None, hold: IndexHold | None = None) -> dict[str, Any]:
    """One sync, as `memd sync` and the daemon run it; recorded in `memd/sync.json`. Raises on failure.
    `hold`: the daemon's (`JobContext.index_held`): a MEMORY.md under an agent at work waits for it."""

    on, remote, every_s, _t = settings_of(settings)
    if not on:
        raise SyncNotConfigured("memd.git is off: set \"memd\": {\"git\": true, \"sync\": {\"remote\": URL}} in settings.json")
    st = read_state(home)
    now = time.time()
    from memd.clock import iso, system_clock  # noqa: PLC0415 - start-up
    st.update({"last_attempt": iso(system_clock()), "last_attempt_ts": now, "remote": remote or None})
    t0 = time.monotonic()
    try:
        result = _sync(home, settings, remote, host, hold)
    except Exception as exc:
        failures = int(st.get("failures") or 0) + 1
        wait = retry_after(failures, every_s)
        st.update({"failures": failures, "last_error": str(exc) or type(exc).__name__, "next_try_ts": now + wait,
                   "next_try": _iso_in(wait)})  # fmt: skip
        _write_state(home, st)
        log.warning("sync.failed", remote=remote, reason=str(exc), failures=failures, retry_in_s=round(wait))
        if isinstance(exc, MemdError):
            raise
        raise SyncError(f"sync failed: {exc}") from exc
    result["duration_ms"] = int(1000 * (time.monotonic() - t0))
    st.update({"failures": 0, "last_error": None, "next_try_ts": None, "next_try": None,
               "last_ok": iso(system_clock()) if result.get("pushed") or not remote else st.get("last_ok"),
               "pushed": result.get("head") if remote else st.get("pushed"),
               "last_result": {k: result[k] for k in ("merged", "fast_forward", "applied", "conflicts", "proposals", "pushed",
                                                        "committed", "rounds", "duration_ms") if k in result}})  # fmt: skip
    _write_state(home, st)
    log.info("sync.finished", remote=remote, **{k: result[k] for k in ("pushed", "merged", "rounds", "duration_ms")},
             conflicts=len(result["conflicts"]), applied=sum(len(v) for v in result["applied"].values()))  # fmt: skip
    if not remote:
        raise SyncNotConfigured("memd.sync.remote is not set: memory was committed locally only "
                                f"({home.memd_dir / 'git'}); set it to any git URL to sync")  # fmt: skip
    return result


def _iso_in(seconds: float) -> str:
    from datetime import timedelta  # noqa: PLC0415 - start-up

    from memd.clock import iso, system_clock  # noqa: PLC0415 - start-up
    return iso(system_clock() + timedelta(seconds=seconds))


def _sync(home: Home, settings: Settings, remote: str, host: str | None, hold: IndexHold | None) -> dict[str, Any]:
    _on, _remote, _every, timeout = settings_of(settings)
    from memd.git.repo import Repo  # noqa: PLC0415 - start-up
    repo = Repo(home, host)
    result: dict[str, Any] = {"remote": remote or None, "committed": 0, "merged": False, "fast_forward": False,
                              "applied": {}, "conflicts": [], "proposals": [], "pushed": False, "rounds": 0,
                              "head": None}  # fmt: skip
    from memd.discovery import list_project_keys  # noqa: PLC0415 - start-up
    from memd.locks import acquire  # noqa: PLC0415 - start-up
    from memd.sync.integrate import integrate  # noqa: PLC0415 - start-up
    for _round in range(MAX_ROUNDS):
        result["rounds"] += 1
        if remote:
            with repo.locked(timeout):
                _set_remote(repo, remote)
                _fetch(repo, remote)
        places = [Place.global_(), *(Place.project(k) for k in list_project_keys(home))]
        with acquire(home, places, timeout=timeout), repo.locked(timeout):
            repo.ensure_initial(settings)
            got = repo.commit(repo.local_places(), subject="changes not committed yet (hand edits)", user=True,
                              materialize=True, settings=settings, trailers={"Memd-Job": "hand-edit"})  # fmt: skip
            result["committed"] += 1 if got.sha else 0
            if remote:
                integrate(repo, settings, result, hold)
            result["head"] = repo.git.rev(REF)
        if not remote or result["head"] is None:
            return result
        with repo.locked(timeout):
            outcome = _push(repo, remote)
        if outcome == "ok":
            result["pushed"] = True
            return result
        log.info("sync.push_rejected", remote=remote, round=result["rounds"])
    raise SyncError(f"{remote}: the remote kept moving while we merged ({MAX_ROUNDS} rounds); the next sync retries")


def _set_remote(repo: Repo, remote: str) -> None:
    """`origin` is `memd.sync.remote` (`~` expanded: git does not expand it in a configured path), and
    fetches into `refs/remotes/origin/*`. Both are checked every time, not the refspec only when the URL
    changes: a kill between the two writes left a URL without a refspec, so `fetch` filled only
    FETCH_HEAD, the merge saw an old `origin/main`, and every push after was refused as non-fast-forward."""
    g = repo.git
    remote = os.path.expanduser(remote) if remote.startswith("~") else remote
    refspec = f"+refs/heads/*:refs/remotes/{REMOTE}/*"
    cur = g.run("config", "--get", f"remote.{REMOTE}.url", ok=(0, 1)).stdout.decode().strip()
    if cur != remote:
        g.run("config", f"remote.{REMOTE}.url", remote)
    fetch = g.run("config", "--get-all", f"remote.{REMOTE}.fetch", ok=(0, 1)).stdout.decode().split()
    if refspec not in fetch:  # added beside any refspec the user gave the repository by hand
        g.run("config", "--add", f"remote.{REMOTE}.fetch", refspec)


def network_git(git: Git, *args: str, ok: tuple[int, ...] = (0,), idle: float | None = None,
                overall: float | None = None) -> subprocess.CompletedProcess[bytes]:  # fmt: skip
    """One git command that talks to the remote, bounded twice: nothing received for `idle` seconds
    (`NETWORK_IDLE_SECONDS`; git reports progress on stderr while a transfer moves) or `overall`
    seconds in all, and the process is killed and GitError raised. A `git://` server that accepts
    and never answers holds the git lock for `idle` seconds, not `overall`."""
    import selectors  # noqa: PLC0415 - start-up
    import subprocess  # noqa: PLC0415 - start-up
    idle = NETWORK_IDLE_SECONDS if idle is None else idle
    overall = NETWORK_TIMEOUT_SECONDS if overall is None else overall
    cmd = ["git", "-c", "core.hooksPath=/dev/null", "-c", "gc.autoDetach=false", *_NETWORK_CONFIG, *args]
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=git.env())  # fmt: skip
    except FileNotFoundError:
        raise GitError("git is not installed (memd.git needs the `git` command)") from None
    assert proc.stdout is not None and proc.stderr is not None
    fd_out, fd_err = proc.stdout.fileno(), proc.stderr.fileno()
    out: dict[int, bytearray] = {fd_out: bytearray(), fd_err: bytearray()}
    sel = selectors.DefaultSelector()
    for f in (proc.stdout, proc.stderr):
        sel.register(f, selectors.EVENT_READ)
    start = last = time.monotonic()
    why = ""
    try:
        while sel.get_map():
            now = time.monotonic()
            if now - last >= idle:
                why = f"no answer for {idle:.0f} s"
                break
            if now - start >= overall:
                why = f"not done within {overall:.0f} s"
                break
            for key, _ev in sel.select(timeout=min(1.0, idle)):
                chunk = os.read(key.fd, 65536)
                if chunk:
                    out[key.fd] += chunk
                    last = time.monotonic()
                else:
                    sel.unregister(key.fileobj)
    finally:
        sel.close()
        if why:
            proc.kill()
        rc = proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    if why:
        raise GitError(f"git {args[0]}: {why}")
    p = subprocess.CompletedProcess(cmd, rc, bytes(out[fd_out]), bytes(out[fd_err]))
    if rc not in ok:
        from memd.git.plumbing import first_line  # noqa: PLC0415 - start-up
        raise GitError(f"git {args[0]}: {first_line(p.stderr) or f'exit {rc}'}")
    return p


def _fetch(repo: Repo, remote: str) -> None:
    try:
        network_git(repo.git, "fetch", "--progress", "--no-tags", "--prune", REMOTE)
    except GitError as exc:
        raise SyncError(f"{remote}: unreachable ({str(exc).removeprefix('git fetch: ')}); "
                        "local work goes on and the sync is retried") from None  # fmt: skip


def _push(repo: Repo, remote: str) -> str:
    """'ok', or 'rejected' when the remote moved since our fetch (never forced)."""
    p = network_git(repo.git, "push", "--progress", "--porcelain", REMOTE, f"{REF}:{REF}", ok=(0, 1, 128))
    out = p.stdout.decode("utf-8", "replace")
    if p.returncode == 0:
        return "ok"
    if "[rejected]" in out or "fetch first" in out or "non-fast-forward" in out:
        return "rejected"

    from memd.git.plumbing import first_line  # noqa: PLC0415 - start-up
    why = first_line(p.stderr) or first_line(out) or f"exit {p.returncode}"
    raise SyncError(f"{remote}: push failed ({why}); local work goes on and the sync is retried")


# --------------------------------------------------------------------------- status


def status(home: Home, settings: Settings) -> dict[str, Any]:
    """The `sync` field of `memd status`: settings, the last sync, and how far each side is ahead."""
    on, remote, every_s, _t = settings_of(settings)
    st = read_state(home)
    out: dict[str, Any] = {
        "git": on, "remote": remote or None, "every_minutes": int(every_s // 60),
        "last_ok": st.get("last_ok"), "last_attempt": st.get("last_attempt"), "last_error": st.get("last_error"),
        "failures": int(st.get("failures") or 0), "next_try": st.get("next_try"),
        "ahead": None, "behind": None, "refused": [], "not_synced": [], "conflicts": (st.get("last_result") or {}).get("conflicts", []),
    }  # fmt: skip
    try:
        g = json.loads((home.memd_dir / "gitmem.json").read_text(encoding="utf-8"))
        out["refused"] = [{"file": v.get("file"), "reason": v.get("reason"), "since": v.get("since")}
                          for v in (g.get("refused") or {}).values()
                          if isinstance(v, dict) and not v.get("incoming")]  # fmt: skip
        out["not_synced"] = [{"key": k, "identity": v.get("identity"), "synced_key": v.get("shadowed_by")}
                             for k, v in sorted((g.get("projects") or {}).items())
                             if isinstance(v, dict) and v.get("shadowed_by")]  # fmt: skip
    except (OSError, ValueError, AttributeError):
        pass
    from memd.git.quarantine import summary  # noqa: PLC0415 - start-up
    out["quarantined"] = summary(home)
    git = Git(home.memd_dir / "git")  # the repository (`Repo`), read without its lock
    if on and (git.git_dir / "HEAD").is_file():
        try:
            ours, theirs = git.rev(REF), git.rev(REMOTE_REF)
            if ours and theirs:
                out["ahead"], out["behind"] = git.counts(ours, theirs)
            elif ours:
                out["ahead"], out["behind"] = int(git.run("rev-list", "--count", ours).stdout), 0
        except GitError as exc:
            out["last_error"] = out["last_error"] or str(exc)
    return out


def render_quarantine(s: dict[str, Any]) -> str | None:
    """The `memd status` line for incoming files kept aside (`memd.git.quarantine`), or None."""
    q = s.get("quarantined") or {}
    if not q.get("count"):
        return None
    return (f"quarantined: {q['count']} incoming file(s) kept aside (from a sync or an import; no agent reads them): "
            f"{q['dir']}")  # fmt: skip


def render_status(s: dict[str, Any]) -> str:
    """One line for `memd status`."""
    if not s.get("git"):
        return "sync: off (memd.git is false)"
    if not s.get("remote"):
        line = "sync: memory kept in git, no remote (memd.sync.remote)"
    else:
        line = f"sync: {s['remote']} every {s['every_minutes']} min — last ok {s.get('last_ok') or 'never'}"
    if s.get("remote") and s.get("ahead") is not None:
        line += f", {s['ahead']} ahead / {s['behind']} behind"
    if s.get("last_error"):
        line += f"; failing ({s['failures']}×): {s['last_error']}; next try {s.get('next_try')}"
    for n in s.get("not_synced") or []:
        line += (f"\n  not synced: project {n.get('key')} — another checkout of {n.get('identity')} "
                 f"({n.get('synced_key')}) is the one synced")  # fmt: skip
    for r in s.get("refused") or []:
        line += f"\n  not committed (never leaves this machine): {r.get('file')} — {r.get('reason')}"
    return line
