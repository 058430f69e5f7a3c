"""A fetched `main` merged into ours and brought into the live memory directories (one sync: `memd.sync.run`).

Under the scope locks and the git lock: a fast-forward, or a merge commit whose
tree `memd.sync.merge` decides; then what changed is written into each live
directory as one undoable history run (job `sync`), and with `memory.review` on
each conflict also becomes a merge proposal.

A file the local directory holds in another version than our last commit
(refused for a secret, or edited while we merged) is never overwritten: the
incoming version lands beside it as a conflict copy.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from memd.git.layout import GLOBAL_DIR, MANIFEST, dir_files, dump_manifest, free_name, merge_manifests, split_path
from memd.git.plumbing import REF, REMOTE_REF, Entries, SyncError, blob_sha, message
from memd.git.repo import Repo
from memd.git.worktree import write_live
from memd.job.context import make_context
from memd.logs.events import lazy_logger
from memd.memory import readonly
from memd.settings import Settings
from memd.sync.merge import Merged, merge_entries, merged_text
from memd.tree import Home, Place
from memd.write import proposals

log = lazy_logger("memd.sync")


def integrate(repo: Repo, settings: Settings, result: dict[str, Any]) -> None:
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


def _apply(repo: Repo, settings: Settings, ours_t: Entries, merged: Merged, theirs: str, base: str | None,
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


def _propose(home: Home, settings: Settings, place: Place, events: list[dict[str, str]]) -> list[str]:
    """With `memory.review` on, each conflict also becomes one merge proposal (`memd review`):
    the two versions merged into the file, the copy deleted. Returns the proposal ids."""

    conflicts = [e for e in events if e.get("kind") == "changed-both" and e.get("copy")]
    if not conflicts or not proposals.review_on(settings):
        return []

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


def _check_writable(home: Home, settings: Settings, places: list[Place]) -> None:
    """Read-only memory (`memory.readOnly`, `memd readonly`) takes no incoming change: nothing is merged."""

    for place in places:
        why = readonly.reason(home, settings, place.kind, place.key)
        if why:
            raise SyncError(f"{place} is read-only ({why}): changes from the remote wait until it is writable; "
                            "nothing was merged or pushed")  # fmt: skip
