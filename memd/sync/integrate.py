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

from memd.clock import iso, system_clock
from memd.git.layout import (
    GLOBAL_DIR,
    MANIFEST,
    REGULAR_MODES,
    dir_files,
    dump_manifest,
    free_name,
    merge_manifests,
    split_path,
)
from memd.git.plumbing import REF, REMOTE_REF, Entries, SyncError, blob_sha, message
from memd.git.quarantine import keep_aside
from memd.git.repo import Repo
from memd.git.worktree import IndexHold, write_live
from memd.job.context import make_context
from memd.logs.lazy import lazy_logger
from memd.memory import readonly
from memd.settings import Settings
from memd.sync.merge import Merged, merge_entries, merged_text
from memd.tree import Home, Place
from memd.write import proposals

log = lazy_logger("memd.sync")


def integrate(repo: Repo, settings: Settings, result: dict[str, Any], hold: IndexHold | None = None) -> None:
    """Merge the fetched `main` into ours and bring the live directories along. *locked*, scopes locked.
    `hold`: the daemon's (`memd.git.worktree.write_live`); a person's `memd sync` writes MEMORY.md at once."""
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
    if _hold_mass_deletions(ours_t, merged, float(settings.memd.dream_max_delete_share), result):
        ff = False  # our tree keeps what the remote deleted: a merge commit, not a fast-forward
    _warn_skipped(merged.entries, ours_t, result)
    for ev in merged.events:
        log.warning("sync.conflict", **ev)
    kept = _apply(repo, settings, ours_t, merged, theirs, base, result, hold)
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
    """Memory files that differ between two trees; only regular files are memories (`REGULAR_MODES`)."""
    return sorted(p for p in set(a) | set(b) if a.get(p) != b.get(p) and split_path(p)
                  and (b[p][0] if p in b else a[p][0]) in REGULAR_MODES)  # fmt: skip


def _warn_skipped(merged: Entries, ours: Entries, result: dict[str, Any]) -> None:
    """A symlink (120000), a gitlink (160000) or anything else that is not a regular file is no memory:
    skipped, with one warning for the whole sync; the sync goes on."""
    odd = sorted(p for p, (mode, sha) in merged.items()
                 if mode not in REGULAR_MODES and ours.get(p) != (mode, sha))  # fmt: skip
    if odd:
        result["skipped"] = odd
        log.warning("sync.entries_skipped", count=len(odd), entries=[f"{p} ({merged[p][0]})" for p in odd[:10]],
                    reason="not regular files: never memories")  # fmt: skip


def _hold_mass_deletions(ours: Entries, merged: Merged, max_share: float, result: dict[str, Any]) -> bool:
    """A remote commit deleting all of a scope, or more than `memd.dreamMaxDeleteShare` of it, is held:
    our tree keeps those files (they stay here and are pushed back), one warning line says why. The
    user deletes them here, one by one or with `memd forget`, if that was meant. True when any is held."""
    from memd.memory.deletions import too_many_deleted  # noqa: PLC0415 - start-up
    held = False
    for d in sorted({sp[0] for p in ours if (sp := split_path(p))}):
        before, after = dir_files(ours, d), dir_files(merged.entries, d)
        gone = sorted(set(before) - set(after))
        why = too_many_deleted(len(before), len(gone), max_share)
        if why is None:
            continue
        for name in gone:
            merged.entries[f"{d}/{name}"] = ours[f"{d}/{name}"]
        ev = {"kind": "deletions-held", "path": d, "note": f"the remote {why}; kept here (delete them here if meant)"}
        result["conflicts"].append(ev)
        log.warning("sync.deletions_held", dir=d, deleted=len(gone), of=len(before), reason=why)
        held = True
    return held


def _apply(repo: Repo, settings: Settings, ours_t: Entries, merged: Merged, theirs: str, base: str | None,
           result: dict[str, Any], hold: IndexHold | None = None) -> list[Place]:  # fmt: skip
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
    from memd.git.layout import MAX_FILE_BYTES  # noqa: PLC0415 - start-up
    blobs, too_big = repo.git.cat_capped((s for files in by_place.values() for s in files.values() if s), MAX_FILE_BYTES)
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
        aside: list[dict[str, str]] = []
        local_kept = False
        for name, sha in sorted(files.items()):
            if sha in too_big:  # never read: a 200 MB blob stays in git, noted in quarantine
                aside.append(keep_aside(home, place, name, None, f"object {sha} of {too_big[sha]} bytes, over "
                                        f"{MAX_FILE_BYTES} (left in the repository, not read)",
                                        f"sync with {result['remote']}", iso(system_clock())))  # fmt: skip
                continue
            try:
                cur = (live / name).read_bytes() if (live / name).is_file() and not (live / name).is_symlink() else None
            except OSError:
                cur = None
            cur_sha = None if cur is None else blob_sha(cur)
            if cur_sha == sha:
                continue
            if cur_sha == ours_files.get(name) or (cur is None and (repo.state["refused"].get(f"{d}/{name}") or {}).get("incoming")):
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
                          extra={"conflicts": evs} if evs else None, aside=aside, hold=hold)  # fmt: skip
        _record_aside(repo, d, aside, result)
        if done:
            result["applied"][str(place)] = done
        result.setdefault("proposals", []).extend(_propose(home, settings, place, evs))
        if local_kept:
            kept.append(place)
    return kept


def _record_aside(repo: Repo, d: str, aside: list[dict[str, str]], result: dict[str, Any]) -> None:
    """Files kept aside stay in our tree as the remote has them, absent here (the next commit takes their
    absence for no deletion: `refused` marks them incoming); the sync's result and `memd status` count them."""
    for ev in aside:
        repo.state["refused"][f"{d}/{ev['file']}"] = {"file": ev["kept"] or ev["file"], "reason": ev["reason"],
                                                      "since": ev["time"], "incoming": True}  # fmt: skip
    if aside:
        result.setdefault("quarantined", []).extend(aside)


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
