"""Dream history: the runs kept of each scope, listing and pruning them, and undo.

Every change memd makes to a memory directory leaves an entry in
`$HOME/memd/history/<scope-name>/<run-id>/`: a dream's whole snapshot
(`files.pack`, or `files/` before packs; taken and swapped in atomically by
`memd.history.snapshots`) or a write's copies
(`memd.history.writes`), completed by a `run.json` saying what the run changed.

Undo is the same machinery in the other direction: the present is snapshotted
first (so an undo is itself undoable), the chosen snapshot (a `files.pack`, or
the `files/` directory of a run from before packs) is written out (never
linked: a snapshot must stay independent of later in-place edits) into a
staging directory, and swapped in.

Snapshots are checked before they are restored: `snapshot` hashes every file as
it packs it, `write_run_info` records the hashes in `run.json`
(`snapshot_sha256`), and `undo` refuses a snapshot that no longer matches them
(a file changed, missing or added since), restoring nothing. An entry whose
`run.json` cannot be read is listed by `memd history` as damaged (never hidden)
and cannot be undone.

Callers hold the scope's lock for everything here, except `undo`, which takes
it itself.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any

from memd.clock import iso
from memd.errors import UsageError
from memd.fsutil import check_own_tree
from memd.history import kept
from memd.history.snapshots import recover_scope, remove_entry, seal, snapshot, stage_snapshot, swap_in
from memd.history.store import (
    _runs_in,
    history_root,
    new_run_id,
    write_run_info,
)
from memd.history.writes import UndoConflict, refresh_recorded, undo_write
from memd.locks import acquire
from memd.logs.lazy import lazy_logger
from memd.memory.names import is_candidate_name
from memd.settings import Settings
from memd.tree import Home, Place

log = lazy_logger("memd.history")



class HistoryError(UsageError):
    """A history request that cannot be met (unknown run, no snapshot); exit code 2."""








# --------------------------------------------------------------------------- listing, pruning












def list_runs(home: Home, ref: Place | None = None, *, damaged: bool = False) -> list[dict[str, Any]]:
    """Completed history entries (those with a run.json), oldest first; all scopes when `ref` is None.

    With `damaged` (`memd history`, `undo`): also entries whose run.json exists but cannot be
    read, as `{"run", "scope", "kind": "damaged", "time", "reason", "path"}` — listed, never hidden.
    """
    if ref is not None:
        return _runs_in(history_root(home, ref), damaged=damaged, scope=str(ref))
    runs = [r for root in _all_roots(home) for r in _runs_in(root, damaged=damaged)]
    return sorted(runs, key=lambda r: (str(r.get("time") or r["run"]), r["seq"] if isinstance(r.get("seq"), int) else 0))


def _all_roots(home: Home) -> list[Path]:
    try:
        return [home.history_dir / n for n in sorted(os.listdir(home.history_dir))]
    except OSError:
        return []


def prune(home: Home, ref: Place, keep: int) -> list[str]:
    """Keep the newest `keep` entries of a scope; returns the run ids removed."""
    runs = [r["run"] for r in list_runs(home, ref)]
    doomed = runs[: max(0, len(runs) - max(1, keep))]
    for run_id in doomed:
        remove_entry(home, ref, run_id)
    if doomed:
        log.info("history.pruned", scope=str(ref), removed=len(doomed), kept=keep)
    return doomed


# --------------------------------------------------------------------------- undo


def _file_bytes(directory: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    try:
        names = os.listdir(directory)
    except OSError:
        return out
    for n in names:
        p = directory / n
        if is_candidate_name(n) and p.is_file() and not p.is_symlink():
            out[n] = p.read_bytes()
    return out


def diff_files(before_entry: Path, after: Path) -> dict[str, list[str]]:
    """Which memory files an undo brings back, removes and restores to other bytes: the snapshot
    of the present (`before_entry`, a history entry) against the staged directory `after`.

    MEMORY.md is left out: it is derived, and the refresh after the swap rebuilds it.
    """
    a, b = kept.top_files(before_entry, is_candidate_name), _file_bytes(after)
    return {
        "restored": sorted(n for n in b if n in a and a[n] != b[n]),
        "removed": sorted(n for n in a if n not in b),
        "brought_back": sorted(n for n in b if n not in a),
    }


def undo(
    home: Home,
    settings: Settings,
    ref: Place,
    run_id: str | None,
    *,
    now: datetime,
    lock_timeout: float,
    on_wait: Any = None,
    logger: Any = None,
) -> dict[str, Any]:
    """Put the scope back exactly as it was before `run_id` (default: its latest run).

    The present is snapshotted first as a run of kind "undo", so an undo can be
    undone. Bytes, file set and mtimes of the snapshot are restored; then the
    indexes are refreshed (MEMORY.md only changes if the snapshot's was stale).
    """
    logger = logger or log
    check_own_tree(home.memd_dir)  # memd/history through a link would restore (and snapshot) elsewhere
    with acquire(home, [ref], timeout=lock_timeout, on_wait=on_wait):
        recover_scope(home, ref, logger)
        chosen = _choose_run(home, ref, run_id)
        if chosen.get("kind") == "write":
            return _undo_write(home, settings, ref, chosen, now, logger)
        source = Path(chosen["path"])
        if not kept.has_snapshot(source):
            raise HistoryError(f"run {chosen['run']} of {ref} has no snapshot (files.pack and files/ are missing)")
        mismatch = verify_snapshot(source, chosen)
        if mismatch:
            raise HistoryError(f"run {chosen['run']} of {ref}: its snapshot does not match the checksums recorded "
                               f"with it ({mismatch}); nothing restored")  # fmt: skip
        new_id = new_run_id(now)
        while (history_root(home, ref) / new_id).exists():
            new_id = new_run_id(now)
        entry = snapshot(home, ref, new_id)
        try:
            staged = stage_snapshot(home, ref, new_id, source)
            seal(staged)
            staging = staged.path
            changes = diff_files(entry, staging)
            info = {"run": new_id, "scope": str(ref), "kind": "undo", "time": iso(now), "undo_of": chosen["run"],
                    "provider": None, "changes": changes}  # fmt: skip
            write_run_info(entry, info)
            swap_in(home, ref, new_id, staging)
        except BaseException:
            recover_scope(home, ref, logger)
            raise

        refresh_recorded(home, settings, ref, now)
        prune(home, ref, int(settings.memd.history_keep))
    logger.info("dream.undone", scope=str(ref), run=new_id, undo_of=chosen["run"], **{k: len(v) for k, v in changes.items()})
    return info


def _undo_write(home: Home, settings: Settings, ref: Place, chosen: dict[str, Any], now: datetime,
                logger: Any) -> dict[str, Any]:  # fmt: skip
    """A write run (extraction, remember, forget, …): its files back as they were (memd.history.writes)."""

    try:
        info = undo_write(home, ref, chosen, now)
    except UndoConflict as exc:
        raise HistoryError(str(exc)) from None

    refresh_recorded(home, settings, ref, now)
    prune(home, ref, int(settings.memd.history_keep))
    logger.info("write.undone", scope=str(ref), run=info.get("run"), undo_of=chosen["run"])
    return info


def _choose_run(home: Home, ref: Place, run_id: str | None) -> dict[str, Any]:
    runs = list_runs(home, ref, damaged=True)
    if not runs:
        raise HistoryError(f"no history for {ref} (memd has not changed it yet)")
    good = [r for r in runs if r.get("kind") != "damaged"]
    if run_id is None:
        # A MEMORY.md kept beside the agent's lines is rewritten after each write as a run of its own (job
        # `index`); plain `memd undo` means the write, so those are undone by their id only.
        runs = [r for r in runs if r.get("job") != "index"] or runs
        good = [r for r in good if r.get("job") != "index"] or good
        latest = max(runs, key=lambda r: r["run"])  # run ids sort by time
        if latest.get("kind") == "damaged":
            raise HistoryError(f"the latest run of {ref}, {latest['run']}: {latest['reason']}; undo an earlier run "
                               "by its id (`memd history`)")  # fmt: skip
        return good[-1]
    for r in runs:
        if r["run"] == run_id:
            if r.get("kind") == "damaged":
                raise HistoryError(f"run {run_id} of {ref}: {r['reason']}")
            return r
    raise HistoryError(f"no run {run_id!r} in the history of {ref} (see `memd history`)")


def verify_snapshot(entry: Path, run: dict[str, Any]) -> str | None:
    """What differs between a snapshot (the history entry `entry`, either layout) and the sha256
    sums its run recorded, or None when they match. An entry from before sums were recorded has
    none to check: None."""
    sums = run.get("snapshot_sha256")
    if sums is None:
        return None
    if not isinstance(sums, dict) or not all(isinstance(v, str) for v in sums.values()):
        return "its checksums in run.json are unreadable"
    found = kept.found_sums(entry)
    if isinstance(found, str):
        return found
    for rel in sorted(set(sums) | set(found)):
        if rel not in found:
            return f"{rel} is missing"
        if rel not in sums:
            return f"{rel} was not in it"
        if found[rel] != sums[rel]:
            return f"{rel} changed"
    return None


def find_runs(home: Home, run_id: str) -> list[Place]:
    """The scopes a run id belongs to, for `memd undo RUN` without a scope option: one write
    (an extraction into the drawer and a project) is one run id in each scope it changed."""
    hits = [r for r in list_runs(home) if r["run"] == run_id]
    if not hits:
        raise HistoryError(f"no run {run_id!r} in the history (see `memd history`)")
    return sorted({Place.parse(str(r.get("scope"))) for r in hits}, key=lambda p: p.sort_key)
