"""The home's memory repository (the design: `memd.git.commits`): the bare repository, its lock, its state, commits.

`Repo` is `$DEEPCODE_HOME/memd/git`, a plain bare repository created on first
use, and `memd/gitmem.json`, what memd learnt about it: each local project's
identity and whether it is linked to its directory in the tree, files refused,
commits since the last `gc`. Its work happens under `memd/locks/git.lock`
(`Repo.locked`), where git's leftover `*.lock` files are swept; `Repo.commit`
turns the live state of scopes into one commit, `Repo.merge_commit` a sync's merge.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from memd.errors import BusyError
from memd.fsutil import atomic_write, ensure_private_dir
from memd.git.layout import (
    FILE_MODE,
    GLOBAL_DIR,
    MANIFEST,
    dir_files,
    dump_manifest,
    free_name,
    host_name,
    parse_manifest,
    repo_dir,
    resolve_identity,
    split_path,
)
from memd.git.plumbing import BRANCH, REF, Entries, Git, GitError, blob_sha, message, user_identity
from memd.git.worktree import Commit, read_capped, scan_place, write_live
from memd.logs.lazy import lazy_logger
from memd.settings import Settings
from memd.tree import Home, Place

log = lazy_logger("memd.gitmem")

STATE_FILE = "gitmem.json"
LOCK_FILE = "git.lock"
MEMD_NAME = "memd"
GC_EVERY = 200


class GitBusy(BusyError):
    """Another memd process holds the repository (`memd/locks/git.lock`) longer than the caller may wait."""




class Repo:
    """The home's memory repository: state, lock, commits. Methods marked *locked* need `locked()`."""

    def __init__(self, home: Home, host: str | None = None) -> None:
        self.home = home
        self.git = Git(home.memd_dir / "git")
        self.host = host or host_name()
        self.state: dict[str, Any] = {}

    @property
    def state_path(self) -> Path:
        return self.home.memd_dir / STATE_FILE

    def exists(self) -> bool:
        return (self.git.git_dir / "HEAD").is_file()

    # -- lock and state -------------------------------------------------------
    @contextlib.contextmanager
    def locked(self, timeout: float) -> Iterator[Repo]:
        from memd.locks import ensure_locks_dir  # noqa: PLC0415 - start-up

        path = ensure_locks_dir(self.home) / LOCK_FILE
        from filelock import FileLock, Timeout  # noqa: PLC0415 - start-up: filelock only when a lock is taken
        lock = FileLock(path, mode=0o600, thread_local=False, fallback_to_soft=False)
        try:
            lock.acquire(timeout=max(0.0, timeout), poll_interval=0.05)
        except Timeout:
            raise GitBusy(f"the memory repository is busy ({path} held by another memd process); try again") from None
        try:
            self._ensure()
            self._sweep()
            self.state = self._load_state()
            before = json.dumps(self.state, sort_keys=True)
            try:
                yield self
            finally:  # what was learnt (identities, links, refusals) holds even if the caller failed later
                if json.dumps(self.state, sort_keys=True) != before:
                    atomic_write(self.state_path, json.dumps(self.state, indent=1, sort_keys=True) + "\n")
        finally:
            lock.release()

    def _load_state(self) -> dict[str, Any]:
        try:
            data = json.loads(self.state_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}
        if not isinstance(data, dict):
            data = {}
        for k in ("projects", "refused"):
            if not isinstance(data.get(k), dict):
                data[k] = {}
        return data

    def _ensure(self) -> None:
        """The repository, set up whole: a kill between `git init` and its configuration (its HEAD
        exists, the settings do not) is finished by the next run, not taken for a finished set-up."""
        if self.exists() and self._configured():
            return
        ensure_private_dir(self.git.git_dir.parent)
        # Again whenever the set-up did not finish: a git that wrote HEAD before its own config (older ones
        # do) and was killed between the two left a repository only a second `init` completes (it is safe).
        self.git.run("init", "-q", "--bare", "-b", BRANCH, str(self.git.git_dir))
        # A bare repository keeps no reflog by default; memd's users may need one to repair by hand.
        self.git.run("config", "core.logAllRefUpdates", "always")
        self.git.run("config", "memd.layout", "1")  # written last: the mark of a finished set-up
        os.chmod(self.git.git_dir, 0o700)
        log.info("git.initialised", repository=str(self.git.git_dir))

    def _configured(self) -> bool:
        """Whether `_ensure` finished here: its last setting is in the config file (read, not a git run)."""
        try:
            text = (self.git.git_dir / "config").read_text(encoding="utf-8", errors="replace").lower()
        except OSError:
            return False
        return "[memd]" in text and "layout = 1" in text

    def _sweep(self) -> None:
        """Leftovers of a killed git: its lock files. Only called under git.lock, so none is live."""
        root = self.git.git_dir
        stale = list(root.glob("*.lock"))
        for sub in ("refs", "logs"):
            stale += [p for p in (root / sub).rglob("*.lock")] if (root / sub).is_dir() else []
        for p in stale:
            with contextlib.suppress(OSError):
                p.unlink()
                log.warning("git.stale_file_removed", file=str(p))

    # -- identities -----------------------------------------------------------
    def identity(self, key: str, *, recheck: bool = False) -> tuple[str, str]:
        """(identity, directory in the repository) of a local project key; cached in the state file. *locked*"""
        rec = self.state["projects"].get(key)
        if isinstance(rec, dict) and isinstance(rec.get("identity"), str) and not (
            recheck and rec["identity"].startswith("key:") and rec.get("seen") != _dir_stamp(self.home, key)
        ):
            return rec["identity"], repo_dir(rec["identity"])
        identity, root = resolve_identity(self.home, key)
        old = rec if isinstance(rec, dict) else {}
        new = {"identity": identity, "root": root, "seen": _dir_stamp(self.home, key)}
        if old.get("identity") == identity:
            new["attached"] = old.get("attached", False)
        elif old.get("attached"):
            new["moved_from"] = repo_dir(str(old.get("identity")))
        self.state["projects"][key] = new
        return identity, repo_dir(identity)

    def place_dir(self, place: Place) -> str:
        """*locked*"""
        return GLOBAL_DIR if place.is_global else self.identity(place.key or "")[1]

    def primary_keys(self, keys: Iterable[str]) -> dict[str, str]:
        """dir → the one local key synced with it (two checkouts of one repository on one machine:
        the one already attached, else the first by name; the other is reported, not synced). *locked*"""
        keys = sorted(k for k in keys if not self.home.project_memory(k).is_symlink())  # never followed
        out: dict[str, str] = {}
        for key in keys:
            d = self.identity(key, recheck=True)[1]
            cur = out.get(d)
            if cur is None or (self.state["projects"].get(key, {}).get("attached")
                               and not self.state["projects"].get(cur, {}).get("attached")):  # fmt: skip
                out[d] = key
        for key in keys:
            rec = self.state["projects"].get(key, {})
            d = repo_dir(rec.get("identity", f"key:{key}"))
            rec["shadowed_by"] = None if out.get(d) == key else out.get(d)
        return out

    # -- commits --------------------------------------------------------------
    def commit(self, places: list[Place], *, names: dict[Place, set[str]] | None = None, subject: str,
               trailers: dict[str, str], user: bool = False, materialize: bool = False,
               settings: Settings | None = None, exclude: dict[Place, set[str]] | None = None) -> Commit:  # fmt: skip
        """Commit the live state of `places` (only `names` of a place when given). *locked*

        A whole-place commit (names None) also takes in deletions. A project
        directory the repository already holds content for, but that was never
        linked to this machine's key, is first written into the live directory
        (`materialize`, whose caller holds the place's scope lock); without it
        such a place is left for the next sync, so nothing another machine put
        there is ever taken for a local deletion.
        """
        head = self.git.read_ref(REF)
        tree = self.git.tree(head)
        new = dict(tree)
        out = Commit(None)
        puts: dict[str, bytes] = {}
        if any(not p.is_global for p in places):
            self.refresh_primary()  # a second checkout of one repository on this machine is not synced
        for place in places:
            d = self.place_dir(place)
            if not place.is_global:
                rec = self.state["projects"][place.key or ""]
                if rec.get("shadowed_by"):
                    continue
                if not rec.get("attached"):
                    has = bool(dir_files(tree, d))
                    if has and names is None:
                        if not materialize:
                            continue
                        out.written[place] = self._materialize(place, d, tree, head, settings)
                    if names is None or not has:
                        rec["attached"] = True
                moved = rec.pop("moved_from", None) if names is None else None
                if moved and moved != d:
                    for p in [p for p in new if split_path(p) and p.startswith(moved + "/")]:
                        del new[p]
                        out.changed.append(p)
            scan_place(d, place.memory_dir(self.home), new, None if names is None else names.get(place, set()),
                       puts, out, (exclude or {}).get(place, set()), self.state["refused"])  # fmt: skip
            if not place.is_global:
                self._manifest_entry(new, puts, place.key or "", d)
        if new == tree:
            return out
        author = user_identity(self.host) if user else self.memd_identity
        msg = message(subject, {**trailers, "Memd-Host": self.host})
        out.sha = self.git.fast_commit(head, None, tree, new, puts, msg, author, self.memd_identity)
        self._after_commit()
        log.info("git.committed", commit=out.sha[:12], subject=subject[:120], files=len(out.changed))
        return out

    def merge_commit(self, ours: str, theirs: str, merged: Entries, puts: dict[str, bytes], msg: str) -> str:
        """A merge commit (parents ours, theirs) whose tree is `merged`, onto `main`. *locked*"""
        sha = self.git.fast_commit(ours, theirs, self.git.tree(ours), merged, puts, msg, self.memd_identity,
                                   self.memd_identity)  # fmt: skip
        self._after_commit()
        return sha

    def _after_commit(self) -> None:
        """Without a fetch now and then nothing runs git's own housekeeping: every GC_EVERY commits, `gc --auto`."""
        n = int(self.state.get("commits_since_gc") or 0) + 1
        if n >= GC_EVERY:
            with contextlib.suppress(GitError):
                self.git.run("gc", "--auto", "--quiet", timeout=600)
            n = 0
        self.state["commits_since_gc"] = n

    @property
    def memd_identity(self) -> tuple[str, str]:
        return MEMD_NAME, f"{MEMD_NAME}@{self.host}"

    def ensure_initial(self, settings: Settings, exclude: dict[Place, set[str]] | None = None) -> None:
        """The first commit takes in the drawer and every project memory directory as they are
        (but `exclude`: a write's own files, which get their own commit next). *locked*"""
        if self.git.read_ref(REF) is not None:
            return

        from memd.discovery import list_memory_dirs  # noqa: PLC0415 - start-up
        places = [Place.memory(key) for _s, key, _p in list_memory_dirs(self.home)]
        self.commit(places, subject="memd: start keeping memory in git", settings=settings, exclude=exclude,
                    trailers={"Memd-Job": "init"})  # fmt: skip

    def refresh_primary(self) -> dict[str, str]:
        """dir → the local key synced with it, over every local project. *locked*"""
        from memd.discovery import list_project_keys  # noqa: PLC0415 - start-up

        return self.primary_keys(list_project_keys(self.home))

    def local_places(self) -> list[Place]:
        """The drawer and every local project that is the primary checkout of its identity. *locked*"""
        return [Place.global_(), *(Place.project(k) for k in sorted(self.refresh_primary().values()))]

    def _manifest_entry(self, new: Entries, puts: dict[str, bytes], key: str, d: str) -> None:
        """Record this machine's key for the project in manifest.json (only when it is not there yet)."""
        rec = self.state["projects"][key]
        current = new.get(MANIFEST, ("", ""))[1]
        if current and rec.get("manifest") == current:
            return  # checked against this very manifest before
        identity = rec["identity"]
        manifest = parse_manifest(puts[MANIFEST]) if MANIFEST in puts else self.manifest(new)
        entry = manifest["projects"].setdefault(d.split("/", 1)[1], {"identity": identity, "keys": {}})
        if not (entry.get("identity") == identity and entry.get("keys", {}).get(self.host) == key):
            entry["identity"] = identity
            entry.setdefault("keys", {})[self.host] = key
            puts[MANIFEST] = dump_manifest(manifest)
            new[MANIFEST] = (FILE_MODE, blob_sha(puts[MANIFEST]))
        rec["manifest"] = new[MANIFEST][1]

    def manifest(self, entries: Entries) -> dict[str, Any]:
        sha = entries.get(MANIFEST, ("", ""))[1]
        return parse_manifest(self.git.cat([sha])[sha] if sha else b"")

    def _materialize(self, place: Place, d: str, tree: Entries, head: str | None,
                     settings: Settings | None) -> list[str]:
        """A project seen on another machine first: its memories land in this machine's directory.

        Files absent here are written; a file of the same name with other content
        here is kept and the repository's version lands beside it, renamed.
        """
        live = place.memory_dir(self.home)
        files = dir_files(tree, d)
        from memd.git.layout import MAX_FILE_BYTES  # noqa: PLC0415 - start-up
        blobs, too_big = self.git.cat_capped(files.values(), MAX_FILE_BYTES)
        writes: dict[str, bytes | None] = {}
        taken = set(files)
        with contextlib.suppress(OSError):
            taken |= set(os.listdir(live))
        for name, sha in sorted(files.items()):
            if sha in too_big:
                log.warning("git.object_too_large", file=f"{d}/{name}", object=sha, bytes=too_big[sha])
                continue
            cur = read_capped(live / name) if (live / name).is_file() else None
            if cur is None:
                writes[name] = blobs[sha]
            elif blob_sha(cur) != sha:
                other = free_name(name, f"-{self.git.host_of(f'{d}/{name}', head or REF, None)}", taken)
                taken.add(other)
                writes[other] = blobs[sha]
        identity = self.state["projects"][place.key or ""]["identity"]
        aside: list[dict[str, str]] = []
        done = write_live(self.home, place, writes, job="sync",
                          reason=f"memories of {identity} from the repository (first linked on this machine)",
                          settings=settings, aside=aside)  # fmt: skip
        for ev in aside:  # kept aside, still in the tree: its absence here is no deletion (`scan_place`)
            self.state["refused"][f"{d}/{ev['file']}"] = {"file": ev["kept"] or ev["file"], "reason": ev["reason"],
                                                          "since": ev["time"], "incoming": True}  # fmt: skip
        return done


def _dir_stamp(home: Home, key: str) -> int:
    try:
        return home.project_dir(key).stat().st_mtime_ns
    except OSError:
        return 0
