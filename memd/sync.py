"""`memd sync`: the memory repository (`memd.gitmem`) fetched, merged and pushed with `memd.sync.remote`.

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
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memd.errors import ConfigError, MemdError
from memd.fsutil import atomic_write
from memd.gitmem import (
    GLOBAL_DIR,
    MANIFEST,
    REF,
    REMOTE,
    REMOTE_REF,
    Entries,
    GitError,
    Repo,
    blob_sha,
    dir_files,
    dump_manifest,
    free_name,
    merge_manifests,
    split_path,
    write_live,
)
from memd.logs import lazy_logger
from memd.tree import Home, Place

log = lazy_logger("memd.sync")

STATE_FILE = "sync.json"
MAX_ROUNDS = 4
AFTER_WRITE_SECONDS = 10.0
BACKOFF_BASE_SECONDS = 15.0
BACKOFF_MAX_SECONDS = 3600.0
NETWORK_TIMEOUT_SECONDS = 300.0
_CONFLICT = re.compile(r"^(?P<stem>.+)\.conflict-[A-Za-z0-9-]+(?:-\d+)?\.md$")


class SyncError(MemdError):
    """error: the sync could not finish (remote unreachable, refused push); local work goes on."""


class SyncNotConfigured(ConfigError):
    """configuration: memd.git is off, or memd.sync.remote is not set."""


# --------------------------------------------------------------------------- the merge (pure)


@dataclass
class Merged:
    entries: Entries
    events: list[dict[str, str]] = field(default_factory=list)  # kind, path, copy, host


def merge_entries(base: Entries, ours: Entries, theirs: Entries, host_of: Callable[[str], str]) -> Merged:
    """Three trees → one, file by file, losing no version (see the module docstring).

    `manifest.json` is left to the caller (a union of its JSON). A copy's name
    is reused when it already holds theirs' version (a sync repeated after a
    crash makes no second copy); a conflict copy identical to its file is dropped.
    """
    out: Entries = {}
    res = Merged(out)
    copies: list[tuple[str, tuple[str, str], str]] = []
    for path in sorted(set(base) | set(ours) | set(theirs)):
        if path == MANIFEST:
            continue
        b, o, t = base.get(path), ours.get(path), theirs.get(path)
        r = o
        if o == t or t == b:
            r = o
        elif o == b:
            r = t
        elif o is None:
            r = t
            res.events.append({"kind": "kept-changed", "path": path, "note": "changed there, deleted here"})
        elif t is None:
            res.events.append({"kind": "kept-changed", "path": path, "note": "changed here, deleted there"})
        else:
            assert t is not None
            copies.append((path, t, "created-both" if b is None else "changed-both"))
        if r is not None:
            out[path] = r
    for path, t, kind in copies:
        host = host_of(path)
        d, name = split_path(path) or (path.rsplit("/", 1)[0] if "/" in path else "", path.rsplit("/", 1)[-1])
        suffix = f".conflict-{host}" if kind == "changed-both" else f"-{host}"
        prefix = f"{d}/" if d else ""
        taken = {p[len(prefix):] for p in out if p.startswith(prefix) and "/" not in p[len(prefix):]}
        copy = _reuse_or_free(name, suffix, taken, {n for n in taken if out.get(prefix + n) == t})
        out[prefix + copy] = t
        res.events.append({"kind": kind, "path": path, "copy": prefix + copy, "host": host})
    for path in [p for p in out if (sp := split_path(p)) and _CONFLICT.match(sp[1])]:
        d, name = split_path(path)  # type: ignore[misc]
        m = _CONFLICT.match(name)
        if m and out.get(f"{d}/{m.group('stem')}.md") == out[path]:
            del out[path]
    return res


def _reuse_or_free(name: str, suffix: str, taken: set[str], holding: set[str]) -> str:
    """`<stem><suffix>.md` (then `-2`, `-3`…), or the first of those already holding the same version."""
    stem = name[: -len(".md")] if name.endswith(".md") else name
    ext = ".md" if name.endswith(".md") else ""
    cand, n = f"{stem}{suffix}{ext}", 2
    while cand in taken:
        if cand in holding:
            return cand
        cand, n = f"{stem}{suffix}-{n}{ext}", n + 1
    return cand


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
    from memd.fsutil import ensure_private_dir

    ensure_private_dir(home.memd_dir)
    atomic_write(state_path(home), json.dumps(data, indent=1, sort_keys=True) + "\n")


def backoff_seconds(failures: int, every_s: float) -> float:
    """15 s, 30 s, 60 s… after consecutive failures, never past the interval (nor an hour)."""
    cap = max(BACKOFF_BASE_SECONDS, min(BACKOFF_MAX_SECONDS, every_s))
    return min(cap, BACKOFF_BASE_SECONDS * 2 ** max(0, failures - 1))


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


def settings_of(settings: Any) -> tuple[bool, str, float, float]:
    """(git on, remote, interval in seconds, lock timeout)."""
    return (bool(settings.get("memd.git")), str(settings.get("memd.sync.remote") or ""),
            60.0 * float(settings.get("memd.sync.everyMinutes")), float(settings.get("memd.lockTimeoutSeconds")))  # fmt: skip


def run(home: Home, settings: Any, *, host: str | None = None) -> dict[str, Any]:
    """One sync, as `memd sync` and the daemon run it; recorded in `memd/sync.json`. Raises on failure."""
    from memd.clock import iso, system_clock

    on, remote, every_s, _t = settings_of(settings)
    if not on:
        raise SyncNotConfigured("memd.git is off: set \"memd\": {\"git\": true, \"sync\": {\"remote\": URL}} in settings.json")
    st = read_state(home)
    now = time.time()
    st.update({"last_attempt": iso(system_clock()), "last_attempt_ts": now, "remote": remote or None})
    t0 = time.monotonic()
    try:
        result = _sync(home, settings, remote, host)
    except Exception as exc:
        failures = int(st.get("failures") or 0) + 1
        wait = backoff_seconds(failures, every_s)
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
    from datetime import timedelta

    from memd.clock import iso, system_clock

    return iso(system_clock() + timedelta(seconds=seconds))


def _sync(home: Home, settings: Any, remote: str, host: str | None) -> dict[str, Any]:
    from memd.locks import acquire
    from memd.tree import list_project_keys

    _on, _remote, _every, timeout = settings_of(settings)
    repo = Repo(home, host)
    result: dict[str, Any] = {"remote": remote or None, "committed": 0, "merged": False, "fast_forward": False,
                              "applied": {}, "conflicts": [], "proposals": [], "pushed": False, "rounds": 0,
                              "head": None}  # fmt: skip
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
                _integrate(repo, settings, result)
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
    """`origin` is `memd.sync.remote` (`~` expanded: git does not expand it in a configured path)."""
    g = repo.git
    remote = os.path.expanduser(remote) if remote.startswith("~") else remote
    cur = g.run("config", "--get", f"remote.{REMOTE}.url", ok=(0, 1)).stdout.decode().strip()
    if cur != remote:
        g.run("config", f"remote.{REMOTE}.url", remote)
        g.run("config", "--replace-all", f"remote.{REMOTE}.fetch", f"+refs/heads/*:refs/remotes/{REMOTE}/*")


def _fetch(repo: Repo, remote: str) -> None:
    try:
        repo.git.run("fetch", "--quiet", "--no-tags", "--prune", REMOTE, timeout=NETWORK_TIMEOUT_SECONDS)
    except GitError as exc:
        raise SyncError(f"{remote}: unreachable ({str(exc).removeprefix('git fetch: ')}); "
                        "local work goes on and the sync is retried") from None  # fmt: skip


def _push(repo: Repo, remote: str) -> str:
    """'ok', or 'rejected' when the remote moved since our fetch (never forced)."""
    p = repo.git.run("push", "--porcelain", REMOTE, f"{REF}:{REF}", ok=(0, 1, 128), timeout=NETWORK_TIMEOUT_SECONDS)
    out = p.stdout.decode("utf-8", "replace")
    if p.returncode == 0:
        return "ok"
    if "[rejected]" in out or "fetch first" in out or "non-fast-forward" in out:
        return "rejected"
    from memd.gitmem import first_line

    why = first_line(p.stderr) or first_line(out) or f"exit {p.returncode}"
    raise SyncError(f"{remote}: push failed ({why}); local work goes on and the sync is retried")


def _integrate(repo: Repo, settings: Any, result: dict[str, Any]) -> None:
    """Merge the fetched `main` into ours and bring the live directories along. *locked*, scopes locked."""
    g = repo.git
    ours, theirs = g.rev(REF), g.rev(REMOTE_REF)
    if theirs is None or theirs == ours or (ours is not None and g.is_ancestor(theirs, ours)):
        return
    base = g.merge_base(ours, theirs) if ours else None
    ours_t, theirs_t = g.tree(ours), g.tree(theirs)
    ff = ours is None or base == ours
    puts: dict[str, bytes] = {}
    if ff:
        merged = Merged(dict(theirs_t))
    else:
        base_t = g.tree(base)
        merged = merge_entries(base_t, ours_t, theirs_t, lambda p: g.host_of(p, theirs, base))
        mans = [repo.manifest(t) for t in (base_t, ours_t, theirs_t)]
        union = dump_manifest(merge_manifests(*mans))
        if MANIFEST in ours_t or MANIFEST in theirs_t:
            puts[MANIFEST] = union
            merged.entries[MANIFEST] = ("100644", blob_sha(union))
    for ev in merged.events:
        log.warning("sync.conflict", **ev)
    kept = _apply(repo, settings, ours_t, merged, theirs, base, result)
    if ff:
        g.update_ref(theirs, ours, "sync: fast-forward")
    else:
        hosts = g.hosts_between(theirs, ours)
        subject = (f"sync: merge {len(_changed(ours_t, merged.entries))} change(s) from {', '.join(hosts) or 'the remote'}"
                   + (f"; {len(merged.events)} kept both versions" if merged.events else ""))  # fmt: skip
        from memd.gitmem import message

        body = "\n".join(f"{e['kind']}: {e['path']}" + (f" → {e['copy']}" if e.get("copy") else "")
                         + (f" ({e['note']})" if e.get("note") else "") for e in merged.events)  # fmt: skip
        assert ours is not None
        repo.merge_commit(ours, theirs, merged.entries, puts,
                          message(subject, {"Memd-Job": "sync", "Memd-Host": repo.host}, body))
    result["merged"] = True
    result["fast_forward"] = ff
    result["conflicts"] += merged.events
    if kept:
        repo.commit(kept, subject="sync: local versions kept beside incoming ones", settings=settings,
                    trailers={"Memd-Job": "sync"})  # fmt: skip


def _changed(a: Entries, b: Entries) -> list[str]:
    return sorted(p for p in set(a) | set(b) if a.get(p) != b.get(p) and split_path(p))


def _apply(repo: Repo, settings: Any, ours_t: Entries, merged: Merged, theirs: str, base: str | None,
           result: dict[str, Any]) -> list[Place]:  # fmt: skip
    """Write what the merge changed into the live directories; returns places where a local version was kept."""
    home = repo.home
    dirs = {d: Place.project(k) for d, k in repo.refresh_primary().items()
            if repo.state["projects"].get(k, {}).get("attached")}  # fmt: skip
    dirs[GLOBAL_DIR] = Place.global_()
    by_place: dict[Place, dict[str, str | None]] = {}
    for path in _changed(ours_t, merged.entries):
        d, name = split_path(path)  # type: ignore[misc]
        if d in dirs:
            sha = merged.entries.get(path, ("", ""))[1] or None
            by_place.setdefault(dirs[d], {})[name] = sha
    _check_writable(home, settings, list(by_place))
    blobs = repo.git.cat(s for files in by_place.values() for s in files.values() if s)
    kept: list[Place] = []
    events_by_dir: dict[str, list[dict[str, str]]] = {}
    for ev in merged.events:
        events_by_dir.setdefault(ev["path"].rsplit("/", 1)[0], []).append(ev)
    for place, files in sorted(by_place.items(), key=lambda kv: kv[0].sort_key):
        live = place.memory_dir(home)
        d = GLOBAL_DIR if place.is_global else repo.place_dir(place)
        ours_files = dir_files(ours_t, d)
        taken = set(dir_files(merged.entries, d))
        writes: dict[str, bytes | None] = {}
        local_kept = False
        for name, sha in sorted(files.items()):
            try:
                cur = (live / name).read_bytes() if (live / name).is_file() and not (live / name).is_symlink() else None
            except OSError:
                cur = None
            cur_sha = None if cur is None else blob_sha(cur)
            if cur_sha == sha:
                continue
            if cur_sha == ours_files.get(name):
                writes[name] = None if sha is None else blobs[sha]
            elif sha is not None:  # a local version our commit does not hold: keep it, put theirs beside it
                host = repo.git.host_of(f"{d}/{name}", theirs, base)
                copy = free_name(name, f".conflict-{host}", taken | set(_listdir(live)))
                taken.add(copy)
                writes[copy] = blobs[sha]
                local_kept = True
                ev = {"kind": "kept-local", "path": f"{d}/{name}", "copy": f"{d}/{copy}", "host": host}
                result["conflicts"].append(ev)
                log.warning("sync.conflict", **ev)
        evs = events_by_dir.get(d, [])
        reason = f"sync with {result['remote']}: {len(writes)} file(s)"
        if evs:
            reason += "; kept both versions of " + ", ".join(e["path"].rsplit("/", 1)[1] for e in evs)
        done = write_live(home, place, writes, job="sync", reason=reason, settings=settings,
                          extra={"conflicts": evs} if evs else None)  # fmt: skip
        if done:
            result["applied"][str(place)] = done
        result.setdefault("proposals", []).extend(_propose(home, settings, place, evs))
        if local_kept:
            kept.append(place)
    return kept


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def merged_text(ours: bytes, theirs: bytes) -> str | None:
    """A first draft of one memory from two versions, for the user to review: the newer version
    (by `metadata.updated`; ours on a tie) with the other's body lines it lacks appended.
    None when either version is not a memory memd can read."""
    from memd.memories import MemoryParseError, parse_memory, render_memory

    try:
        a, b = parse_memory("ours.md", ours), parse_memory("theirs.md", theirs)
    except MemoryParseError:
        return None
    newer, older = (b, a) if str(b.metadata.get("updated") or "") > str(a.metadata.get("updated") or "") else (a, b)
    have = {line.strip() for line in newer.body.splitlines() if line.strip()}
    extra = [line for line in older.body.splitlines() if line.strip() and line.strip() not in have]
    body = newer.body.rstrip() + ("\n\n" + "\n".join(extra) if extra else "")
    try:
        return render_memory(newer.name, newer.description, newer.type, body, newer.metadata)
    except ValueError:
        return None


def _propose(home: Home, settings: Any, place: Place, events: list[dict[str, str]]) -> list[str]:
    """With `memory.review` on, each conflict also becomes one merge proposal (`memd review`):
    the two versions merged into the file, the copy deleted. Returns the proposal ids."""
    from memd import proposals

    conflicts = [e for e in events if e.get("kind") == "changed-both" and e.get("copy")]
    if not conflicts or not proposals.review_on(settings):
        return []
    from memd.context import make_context

    ids: list[str] = []
    ctx = make_context(home, settings, log=log)
    try:
        live = place.memory_dir(home)
        for e in conflicts:
            name, copy = e["path"].rsplit("/", 1)[1], e["copy"].rsplit("/", 1)[1]
            try:
                text = merged_text((live / name).read_bytes(), (live / copy).read_bytes())
                if text is None:
                    continue
                p = proposals.propose_directory_change(
                    ctx, place, {name: text, copy: None}, job="sync", provider="sync",
                    reason=f"sync: {name} was changed here and on {e['host']}; both versions are kept "
                           f"({name}, {copy}) — accept to merge them into {name}",
                    details={"conflict": e})  # fmt: skip
            except Exception as exc:  # the two files are kept either way
                log.warning("sync.proposal_failed", path=e["path"], reason=str(exc))
                continue
            if p is not None:
                ids.append(p.id)
                e["proposal"] = p.id
    finally:
        ctx.conn.close()
    return ids


def _check_writable(home: Home, settings: Any, places: list[Place]) -> None:
    """Read-only memory (`memory.readOnly`, `memd readonly`) takes no incoming change: nothing is merged."""
    from memd import readonly

    for place in places:
        why = readonly.reason(home, settings, place.kind, place.key)
        if why:
            raise SyncError(f"{place} is read-only ({why}): changes from the remote wait until it is writable; "
                            "nothing was merged or pushed")  # fmt: skip


# --------------------------------------------------------------------------- status


def status(home: Home, settings: Any) -> dict[str, Any]:
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
                          for v in (g.get("refused") or {}).values() if isinstance(v, dict)]  # fmt: skip
        out["not_synced"] = [{"key": k, "identity": v.get("identity"), "synced_key": v.get("shadowed_by")}
                             for k, v in sorted((g.get("projects") or {}).items())
                             if isinstance(v, dict) and v.get("shadowed_by")]  # fmt: skip
    except (OSError, ValueError, AttributeError):
        pass
    repo = Repo(home)
    if on and repo.exists():
        try:
            ours, theirs = repo.git.rev(REF), repo.git.rev(REMOTE_REF)
            if ours and theirs:
                out["ahead"], out["behind"] = repo.git.counts(ours, theirs)
            elif ours:
                out["ahead"], out["behind"] = int(repo.git.run("rev-list", "--count", ours).stdout), 0
        except GitError as exc:
            out["last_error"] = out["last_error"] or str(exc)
    return out


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


# --------------------------------------------------------------------------- the daemon's tick


_threads: dict[Path, threading.Thread] = {}
_threads_mu = threading.Lock()


def tick(home: Home, settings: Any, logger: Any = None, *, now: float | None = None) -> bool:
    """Called by the daemon every few seconds: start a sync in the background when one is due.

    Cheap when nothing is due (reads two small files, no git process).
    """
    try:
        on, remote, every_s, _t = settings_of(settings)
    except (KeyError, TypeError, ValueError):
        return False
    if not on or not remote:
        return False
    with _threads_mu:
        t = _threads.get(home.root)
        if t is not None and t.is_alive():
            return False
        st = read_state(home)
        head = _read_ref(home.memd_dir / "git", REF)
        if not due(time.time() if now is None else now, st, every_s, ahead=head is not None and head != st.get("pushed")):
            return False
        t = threading.Thread(target=_background, args=(home, settings, logger), name="memd-sync", daemon=True)
        _threads[home.root] = t
        t.start()
    return True


def _background(home: Home, settings: Any, logger: Any) -> None:
    try:
        run(home, settings)
    except MemdError:
        pass  # logged and recorded by run(); retried with backoff
    except Exception as exc:
        (logger or log).exception("sync.crashed", reason=str(exc))


def wait_idle(home: Home, timeout: float = 30.0) -> bool:
    """For tests and shutdown: wait for a background sync of this home to end."""
    t = _threads.get(home.root)
    if t is None:
        return True
    t.join(timeout)
    return not t.is_alive()
