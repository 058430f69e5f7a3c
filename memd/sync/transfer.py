"""`memd export` / `memd import`: memory moved between homes as one tar file.

Format: a POSIX (pax) tar, gzip-compressed when the file name ends in `.gz` or
`.tgz` (`-` is standard output / input, uncompressed on the way out, either on
the way in). Laid out like the git repository (`memd.git.layout`), by identity:

    memd-export.json            format, host, time; each scope (global, or a project's
                                identity and key); each file's mtime in nanoseconds
    global/<file>.md
    projects/<dir>/<file>.md

Why a tar and not a git bundle: it needs neither git nor `memd.git` on either
side, a user can open it with any archiver, and it carries each file's mtime
(git keeps none), which memd shows as a memory's age: an export imported into an
empty home gives back the same files, byte for byte, with the same mtimes.

Import follows sync's rules (`memd.sync.run`): a file absent here is written; the
same bytes are left alone; other bytes here are kept and the imported version
lands beside them as `<name>.conflict-<host>.md`. A project goes to the local
project with the same identity (its repository's remote), else to the key it
had where it was exported. Each scope is one history run (job `import`, so
`memd undo` takes it back) and, with `memd.git` on, one commit. The archive is
untrusted: only regular files with memory names at those paths are read, each
at most 1 MB, never extracted by path.
"""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
import time
from dataclasses import dataclass, field
from typing import IO, Any

from memd import __version__
from memd.clock import iso, system_clock
from memd.discovery import list_memory_dirs, list_project_keys
from memd.errors import UsageError
from memd.fsutil import sweep_stale_temps
from memd.git.commits import enabled
from memd.git.layout import (
    GLOBAL_DIR,
    MAX_FILE_BYTES,
    PROJECTS_DIR,
    free_name,
    host_name,
    is_memory_name,
    repo_dir,
    resolve_identity,
)
from memd.git.plumbing import blob_sha
from memd.git.quarantine import keep_aside
from memd.git.repo import Repo
from memd.git.worktree import write_live
from memd.locks import acquire
from memd.memory import readonly
from memd.memory.names import hidden_char
from memd.settings import Settings
from memd.tree import Home, Place

MANIFEST_NAME = "memd-export.json"
FORMAT = 1
MAX_MEMBERS = 20_000  # entries of one archive; named in the refusal (a memory directory holds hundreds)
MAX_IMPORT_BYTES = 256 * 1024 * 1024  # all memories of one archive together, read before anything is written
# A project key as memd makes one (`memd.keys.key_for_root`): letters, digits and dashes, one component.
_KEY = re.compile(r"^[A-Za-z0-9-]{1,255}$")
_MIN_MTIME_NS = 0  # 1970: an archive's mtime outside [1970, now] is clamped (2^80 ns would be the year 2446)


class NotAnExport(UsageError):
    """usage: the file is not a memd export (or is damaged)."""


@dataclass
class Exported:
    """What an export wrote: scopes, files and bytes."""

    scopes: int = 0
    files: int = 0
    bytes: int = 0


def _memory_files(directory: Any) -> list[tuple[str, bytes, int]]:
    out: list[tuple[str, bytes, int]] = []
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return out
    for e in entries:
        if not is_memory_name(e.name) or not e.is_file(follow_symlinks=False):
            continue
        st = e.stat(follow_symlinks=False)
        if st.st_size > MAX_FILE_BYTES:
            continue
        with open(e.path, "rb") as fh:
            out.append((e.name, fh.read(), st.st_mtime_ns))
    return out


def export(home: Home, out: IO[bytes], *, project: str | None = None, glob: bool = False,
           compress: bool = False) -> Exported:  # fmt: skip
    """Write the chosen memory (default: everything) to `out` as a tar stream."""

    if project is not None:
        try:
            Place.project(project)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if not home.project_memory(project).is_dir():
            raise UsageError(f"no memory directory for project {project!r} ({home.project_memory(project)})")
    scopes: list[dict[str, Any]] = []
    files: list[tuple[str, bytes, int]] = []
    for scope, key, directory in list_memory_dirs(home):
        if (project is not None and key != project) or (glob and scope != "global"):
            continue
        meta: dict[str, Any]
        if scope == "global":
            d, meta = GLOBAL_DIR, {"dir": GLOBAL_DIR}
        else:
            identity = resolve_identity(home, key or "")[0]
            d = repo_dir(identity)
            meta = {"dir": d, "key": key, "identity": identity}
        found = _memory_files(directory)
        if scope == "global" and not found and not directory.is_dir():
            continue
        scopes.append(meta)
        files += [(f"{d}/{name}", data, mtime) for name, data, mtime in found]
    manifest = {"format": FORMAT, "memd": __version__, "host": host_name(), "exported_at": iso(system_clock()),
                "scopes": scopes, "files": {p: {"mtime_ns": m, "sha1": blob_sha(b)} for p, b, m in files}}  # fmt: skip
    with tarfile.open(fileobj=out, mode="w|gz" if compress else "w|", format=tarfile.PAX_FORMAT) as tar:
        _add(tar, MANIFEST_NAME, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode(), None)
        for path, data, mtime in files:
            _add(tar, path, data, mtime)
    return Exported(len(scopes), len(files), sum(len(b) for _p, b, _m in files))


def _add(tar: tarfile.TarFile, name: str, data: bytes, mtime_ns: int | None) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o600
    info.mtime = (mtime_ns / 1e9) if mtime_ns is not None else int(time.time())
    tar.addfile(info, io.BytesIO(data))


@dataclass
class Imported:
    """What an import did: files written, unchanged, in conflict, skipped or set aside."""

    written: dict[str, list[str]] = field(default_factory=dict)  # scope → files written
    unchanged: int = 0
    conflicts: list[dict[str, str]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    quarantined: list[dict[str, str]] = field(default_factory=list)  # kept aside (`memd.git.quarantine`)
    swept: int = 0  # stale temporaries of a killed import or sync removed first


def _read_archive(src: IO[bytes]) -> tuple[dict[str, Any], dict[str, bytes], dict[str, int]]:
    """(manifest, files, sizes of the regular files over MAX_FILE_BYTES: never read)."""
    manifest: dict[str, Any] | None = None
    files: dict[str, bytes] = {}
    big: dict[str, int] = {}
    total = 0
    try:
        with tarfile.open(fileobj=src, mode="r|*") as tar:
            for n, member in enumerate(tar):
                if n >= MAX_MEMBERS:
                    raise NotAnExport(f"more than {MAX_MEMBERS} entries (memd.sync.transfer.MAX_MEMBERS): "
                                      "not a memd export; nothing was imported")  # fmt: skip
                if not member.isfile():
                    continue
                if member.size > MAX_FILE_BYTES:
                    big[member.name] = member.size
                    continue
                total += member.size
                if total > MAX_IMPORT_BYTES:
                    raise NotAnExport(f"more than {MAX_IMPORT_BYTES >> 20} MB of files "
                                      "(memd.sync.transfer.MAX_IMPORT_BYTES); nothing was imported")  # fmt: skip
                fh = tar.extractfile(member)
                if fh is None:
                    continue
                data = fh.read(MAX_FILE_BYTES + 1)
                if member.name == MANIFEST_NAME:
                    manifest = json.loads(data.decode("utf-8"))
                else:
                    files[member.name] = data
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise NotAnExport(f"not a memd export (a tar file written by `memd export`): {exc}") from None
    except ValueError as exc:
        raise NotAnExport(f"{MANIFEST_NAME} does not parse: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or not isinstance(manifest.get("scopes"), list):
        raise NotAnExport(f"not a memd export: no {MANIFEST_NAME} of format {FORMAT}")
    _check_manifest(manifest)
    return manifest, files, big


def _check_manifest(manifest: dict[str, Any]) -> None:
    """Every directory, key and file the manifest names is one memd would make; else one line, nothing written.
    (A key holding a newline or U+202E would otherwise become a project directory.)"""
    for s in manifest["scopes"]:
        if not isinstance(s, dict):
            raise NotAnExport(f"{MANIFEST_NAME}: a scope is not an object")
        d = s.get("dir")
        if d != GLOBAL_DIR and not (isinstance(d, str) and re.fullmatch(rf"{PROJECTS_DIR}/[A-Za-z0-9._-]{{1,100}}", d)):
            raise NotAnExport(f"{MANIFEST_NAME}: scope directory {str(d)[:80]!r} is not one memd makes")
        key = s.get("key")
        if d != GLOBAL_DIR and key is not None and not (isinstance(key, str) and _KEY.fullmatch(key)):
            raise NotAnExport(f"{MANIFEST_NAME}: project key {str(key)[:80]!r} is not one memd makes")
    files = manifest.get("files")
    for path in files if isinstance(files, dict) else {}:
        d, _, name = str(path).rpartition("/")
        if not is_memory_name(name) or hidden_char(path) or (d != GLOBAL_DIR and "/" in d.removeprefix(PROJECTS_DIR + "/")):
            raise NotAnExport(f"{MANIFEST_NAME}: file {str(path)[:80]!r} is not a memory path memd makes")


def clamp_mtime(mtime_ns: Any, now_ns: int) -> int | None:
    """An archive's mtime as a file may get it: an int within [1970, now], else clamped; None when absent."""
    if not isinstance(mtime_ns, int) or isinstance(mtime_ns, bool):
        return None
    return min(max(mtime_ns, _MIN_MTIME_NS), now_ns)


def sweep_temporaries(directory: Any, now: float) -> int:
    """Remove `write_live`'s own temporaries (`.<memory>.md.<random>.tmp`) once stale (fsutil): what a
    killed import or sync left. Nothing else is touched. Returns how many were removed."""
    return sweep_stale_temps(directory, now, _is_live_temp)


def _is_live_temp(name: str) -> bool:
    return name.startswith(".") and name.endswith(".tmp") and is_memory_name(name[1:].rsplit(".", 2)[0])


def _preflight(home: Home, settings: Settings, by_place: dict[Place, dict[str, Any]]) -> None:
    """Every target checked before anything is written: one line naming what is wrong (exit 2)."""
    for place, files in by_place.items():
        why = readonly.reason(home, settings, place.kind, place.key)
        if why:
            raise UsageError(f"{place}: {why}; nothing was imported")
        if link := home.memory_link(place.key):
            raise UsageError(f"{link}: is a symlink; memd never writes through one; nothing was imported")
        live = place.memory_dir(home)
        for p in ([live.parent] if not place.is_global else []) + [live]:
            if p.is_symlink() or (p.exists() and not p.is_dir()):
                raise UsageError(f"{p}: not a plain directory (a link or a file); nothing was imported")
        for name in files:
            t = live / name
            if t.is_symlink() or (t.exists() and not t.is_file()):
                raise UsageError(f"{t}: not a regular file; nothing was imported")


def _targets(home: Home, scopes: list[Any]) -> dict[str, Place]:
    """Export directory → the local place it goes to (same identity here, else its key)."""

    local: dict[str, str] | None = None
    out: dict[str, Place] = {}
    for s in scopes:
        if not isinstance(s, dict) or not isinstance(s.get("dir"), str):
            continue
        d = s["dir"]
        if d == GLOBAL_DIR:
            out[d] = Place.global_()
            continue
        if not d.startswith(PROJECTS_DIR + "/") or d.count("/") != 1:
            continue
        identity = str(s.get("identity") or "")
        if local is None:
            local = {}
            for k in list_project_keys(home):
                local.setdefault(resolve_identity(home, k)[0], k)
        key = local.get(identity) if identity and not identity.startswith("key:") else None
        try:
            out[d] = Place.project(key or str(s.get("key") or ""))
        except ValueError:
            continue
    return out


def import_(home: Home, src: IO[bytes], settings: Settings, *, source: str = "import",
            now: float | None = None) -> Imported:  # fmt: skip
    """Bring an export's memories into this home (see the module docstring)."""

    now = time.time() if now is None else now
    manifest, files, big = _read_archive(src)
    targets = _targets(home, manifest["scopes"])
    host = "".join(c if c.isascii() and (c.isalnum() or c == "-") else "-"
                   for c in str(manifest.get("host") or "import"))[:40] or "import"  # fmt: skip
    mtimes = {p: clamp_mtime(m.get("mtime_ns"), int(now * 1e9))
              for p, m in (manifest.get("files") or {}).items() if isinstance(m, dict)}  # fmt: skip
    res = Imported()
    by_place: dict[Place, dict[str, tuple[bytes | None, int | None]]] = {}
    entries: dict[str, bytes | None] = {**files, **dict.fromkeys(big)}
    sizes: dict[tuple[Place, str], int] = {}
    for path, data in sorted(entries.items()):
        d, _, name = path.rpartition("/")
        if d not in targets or not is_memory_name(name):
            res.skipped.append(path)
            continue
        mt = mtimes.get(path)
        by_place.setdefault(targets[d], {})[name] = (data, mt if isinstance(mt, int) else None)
        if path in big:
            sizes[targets[d], name] = big[path]
    places = sorted(by_place, key=lambda p: p.sort_key)
    timeout = float(settings.memd.lock_timeout_seconds)
    with acquire(home, places, timeout=timeout):
        _preflight(home, settings, by_place)
        for place in places:
            live = place.memory_dir(home)
            res.swept += sweep_temporaries(live, now)
            writes: dict[str, bytes | None] = {}
            stamps: dict[str, int] = {}
            taken = set(os.listdir(live)) if live.is_dir() else set()
            for name, (data, mt) in sorted(by_place[place].items()):
                if data is None:  # over the cap: never read, noted where status counts it
                    res.quarantined.append(keep_aside(home, place, name, None, f"{sizes[place, name]} "
                                                      f"bytes, over {MAX_FILE_BYTES} (not read)", f"{source} from {host}",
                                                      iso(system_clock())))  # fmt: skip
                    continue
                target = live / name
                cur = target.read_bytes() if target.is_file() and not target.is_symlink() else None
                if cur == data:
                    res.unchanged += 1
                    continue
                if cur is not None or target.is_symlink():
                    holding = [n for n in taken if n.startswith(name[:-3] + f".conflict-{host}")
                               and (live / n).is_file() and (live / n).read_bytes() == data]  # fmt: skip
                    if holding:
                        res.unchanged += 1
                        continue
                    copy = free_name(name, f".conflict-{host}", taken | set(writes))
                    res.conflicts.append({"path": str(target), "copy": str(live / copy)})
                    name = copy
                writes[name] = data
                if mt is not None:
                    stamps[name] = mt
            done = write_live(home, place, writes, job="import", reason=f"{source} from {host}", mtimes=stamps,
                              settings=settings, extra={"conflicts": res.conflicts} if res.conflicts else None,
                              aside=res.quarantined)  # fmt: skip
            if done:
                res.written[str(place)] = done
        if enabled(settings) and res.written:
            with Repo(home).locked(timeout) as repo:
                written = {p: set(res.written.get(str(p), [])) for p in places}
                repo.ensure_initial(settings, exclude=written)
                repo.commit([p for p in places if written[p]], names=written, subject=f"import: {source} from {host}",
                            trailers={"Memd-Job": "import"})  # fmt: skip
    return res
