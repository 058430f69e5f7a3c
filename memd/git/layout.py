"""The memory repository's tree (the design: `memd.git.commits`): which files it holds, where, which project is which.

    manifest.json               which project each directory is: identity, and its key on each machine
    global/<file>.md            the global drawer
    projects/<dir>/<file>.md    one project's memory; <dir> = a readable slug of the identity + 8 hex of its hash

Here: which file names are memories (`is_memory_name`), a project's identity
(its repository's normalised remote URL, else `key:<its local key>`) and its
directory, this machine's name, `manifest.json` (read, written, merged as a union).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from memd.git.plumbing import GIT_LOCATION_VARS, Entries
from memd.memory.names import is_tracked_name
from memd.tree import Home

MANIFEST = "manifest.json"
GLOBAL_DIR = "global"
PROJECTS_DIR = "projects"
FILE_MODE = "100644"
MAX_FILE_BYTES = 1024 * 1024


def is_memory_name(name: str) -> bool:
    """A file git tracks (`memd.memory.names.is_tracked_name`)."""
    return is_tracked_name(name)


def host_name() -> str:
    """This machine's name in commit trailers and conflict copies (`$MEMD_HOST`, else the host name)."""
    import socket  # noqa: PLC0415 - start-up

    raw = os.environ.get("MEMD_HOST") or socket.gethostname().split(".")[0] or "host"
    return re.sub(r"[^A-Za-z0-9-]+", "-", raw).strip("-")[:40] or "host"


_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)$")
_SCP = re.compile(r"^(?:(?P<user>[^@/]+)@)?(?P<host>[^:/]+):(?P<path>.*)$")


def normalise_remote(url: str) -> str | None:
    """A repository's identity from its remote URL: scheme, user, port and `.git` dropped, host lowercased.

    `git@GitHub.com:acme/webshop.git`, `https://me@github.com/acme/webshop` and
    `ssh://git@github.com:22/acme/webshop.git/` are all `github.com/acme/webshop`;
    a local path (`/srv/git/x.git`, `file:///srv/git/x`) is `/srv/git/x`.
    """
    u = url.strip()
    if not u:
        return None
    host = ""
    m = _SCHEME.match(u)
    if m:
        rest = m.group("rest")
        if m.group("scheme").lower() == "file":
            path = rest[rest.find("/"):] if "/" in rest else rest
        else:
            authority, _, path = rest.partition("/")
            host = authority.rsplit("@", 1)[-1]
            host = host[1:host.index("]")] if host.startswith("[") and "]" in host else host.split(":", 1)[0]
    elif (s := _SCP.match(u)) and not re.match(r"^[A-Za-z]:[\\/]", u):
        host, path = s.group("host"), s.group("path")
    else:
        path = u
    path = path.strip().rstrip("/")
    if path.endswith(".git"):
        path = path[: -len(".git")]
    path = path.rstrip("/")
    if host:
        return f"{host.lower()}/{path.lstrip('/')}".rstrip("/")
    return os.path.normpath(path) if path else None


def repo_dir(identity: str) -> str:
    """A project's directory in the repository: readable, and the same on every machine for one identity."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", identity.removeprefix("key:")).strip("-.")[:80] or "project"
    return f"{PROJECTS_DIR}/{readable}-{hashlib.sha256(identity.encode('utf-8', 'surrogateescape')).hexdigest()[:8]}"


def split_path(path: str) -> tuple[str, str] | None:
    """(directory, file name) of a memory file's path in the repository, or None for anything else."""
    parts = path.split("/")
    if len(parts) == 2 and parts[0] == GLOBAL_DIR and is_memory_name(parts[1]):
        return GLOBAL_DIR, parts[1]
    if len(parts) == 3 and parts[0] == PROJECTS_DIR and is_memory_name(parts[2]):
        return f"{PROJECTS_DIR}/{parts[1]}", parts[2]
    return None


REGULAR_MODES = frozenset({"100644", "100755"})


def dir_files(entries: Entries, d: str) -> dict[str, str]:
    """The memory files of one directory of a tree: name → object id. Only regular files are
    memories: a symlink (120000) or a gitlink (160000) someone pushed is never one."""
    out: dict[str, str] = {}
    for p, (mode, sha) in entries.items():
        sp = split_path(p)
        if sp is not None and sp[0] == d and mode in REGULAR_MODES:
            out[sp[1]] = sha
    return out


def parse_manifest(data: bytes) -> dict[str, Any]:
    try:
        m = json.loads(data.decode("utf-8")) if data else {}
    except (ValueError, UnicodeDecodeError):
        m = {}
    if not isinstance(m, dict):
        m = {}
    if not isinstance(m.get("projects"), dict):
        m["projects"] = {}
    m["format"] = 1
    return m


def dump_manifest(m: dict[str, Any]) -> bytes:
    return (json.dumps(m, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()


def merge_manifests(base: dict[str, Any], ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    """The union: every project directory either side knows, every machine's key for it."""
    out = parse_manifest(b"")
    for side in (base, theirs, ours):
        for d, entry in side.get("projects", {}).items():
            if not isinstance(entry, dict):
                continue
            cur = out["projects"].setdefault(d, {"identity": entry.get("identity"), "keys": {}})
            cur["identity"] = entry.get("identity") or cur.get("identity")
            keys = entry.get("keys")
            if isinstance(keys, dict):
                cur["keys"].update({str(k): str(v) for k, v in keys.items()})
    return out


def free_name(name: str, suffix: str, taken: set[str]) -> str:
    """`<stem><suffix>.md`, with `-2`, `-3`… when that is taken too."""
    stem = name[: -len(".md")]
    cand = f"{stem}{suffix}.md"
    n = 2
    while cand in taken:
        cand = f"{stem}{suffix}-{n}.md"
        n += 1
    return cand


def resolve_identity(home: Home, key: str) -> tuple[str, str | None]:
    """A project's identity: the normalised remote URL of its repository, else `key:<key>`.

    The repository is found from the working directory the project's transcripts
    record (the key itself cannot be turned back into a path): the newest
    sessions first, keeping a root whose key is this key.
    """

    pdir = home.project_dir(key)
    found: list[tuple[float, str]] = []
    for sub in (pdir, pdir / ".mewcode" / "sessions"):
        try:
            with os.scandir(sub) as it:
                for e in it:
                    if e.name.endswith(".jsonl") and not e.name.startswith("agent-") and e.is_file(follow_symlinks=False):
                        found.append((e.stat(follow_symlinks=False).st_mtime, e.path))
        except OSError:
            continue
    from memd.discovery import session_cwd  # noqa: PLC0415 - start-up
    from memd.keys import canonical_root, key_for_root  # noqa: PLC0415 - start-up
    for _mtime, path in sorted(found, reverse=True)[:20]:
        cwd = session_cwd(path)
        if not cwd or not os.path.isabs(cwd) or not os.path.isdir(cwd):
            continue
        root = canonical_root(cwd)
        if key_for_root(root) != key:
            continue
        url = remote_url(root)
        ident = normalise_remote(url) if url else None
        return ident or f"key:{key}", str(root)
    return f"key:{key}", None


def remote_url(root: Path) -> str | None:
    """`remote.origin.url` of a project's repository, else its first remote's."""
    import subprocess  # noqa: PLC0415 - start-up

    try:
        p = subprocess.run(["git", "-C", str(root), "config", "--get-regexp", r"^remote\..*\.url$"],
                           capture_output=True, timeout=10, check=False,
                           env={k: v for k, v in os.environ.items() if k not in GIT_LOCATION_VARS})  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    urls: dict[str, str] = {}
    for line in p.stdout.decode("utf-8", "replace").splitlines():
        k, _, v = line.partition(" ")
        urls[k[len("remote.") : -len(".url")]] = v.strip()
    return urls.get("origin") or (urls[sorted(urls)[0]] if urls else None)
