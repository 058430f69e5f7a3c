"""Git-backed memory (`memd.git`, off by default): every memd write is one commit.

**One repository for the whole home**, `$DEEPCODE_HOME/memd/git`, a plain bare
repository (`git -C ~/.deepcode/memd/git log` works; clone it, fix by hand, push).
Its tree is laid out by *identity*, not by local path:

    manifest.json               which project each directory is: identity, and its key on each machine
    global/<file>.md            the global drawer
    projects/<dir>/<file>.md    one project's memory; <dir> = a readable slug of the identity + 8 hex of its hash

A project's identity is its repository's normalised remote URL
(`github.com/acme/webshop`), else `key:<its local key>`: the same repository
checked out at different paths has different keys on different machines, so
local paths cannot be the synced layout. memd therefore maps each memory
directory onto its place in the tree itself: a commit's tree is built with
`git fast-import`, fed the exact bytes memd scanned (one process a commit; a pack
for a big commit, loose objects for a small one; the branch moves only if the new
commit contains its current tip).
The live memory directories are the work tree through that mapping; there is no
second copy of the files.

Why one repository and not one per scope: a sync is then one fetch and one push
whatever the number of projects, to the one URL in settings; a merge of several
scopes is one commit; `git log` shows one history. Per-scope repositories would
need a remote per scope and N round trips per sync. Measured (bench/bench_sync.py,
bench/RESULTS.md "Sync"): the first commit of a home of 1,000 memories takes 0.2 s
(most of it the secret scan of each file), one memd write with its commit 20 ms
(7 ms without git), a scan of the whole home with nothing to commit 28 ms.

Why the git command line and not a library: dulwich (pure Python) or pygit2
(libgit2) would add a dependency whose on-disk behaviour can lag git's own (packed
refs, reflogs, lock files, `safe.directory`), while the point is a repository the
user's own `git` reads and repairs; the CLI is on every machine that has a git
remote at all, its plumbing output is a stable interface, and its ref updates are
atomic under git's own lock files. The cost is process start-up, which the numbers
above include: a write costs one `git fast-import` (trees of recent commits are kept
in memory, so a daemon does not list the tree again).

What is tracked: memory files only — visible `*.md` files of a memory directory
other than `MEMORY.md`. `MEMORY.md`, the drawer render and the search database are
derived and rebuilt on each machine; tracking them would make every sync conflict
on the index.

Secrets never leave the machine: every file is scanned (`memd.redact`) before it
is staged, in every commit (with or without a remote today: any commit may be
pushed later). A file that fails is not committed (its last clean version stays,
or nothing), is listed in `memd/gitmem.json` for `memd status`, and logged.

Locks: all git work on the repository happens under `memd/locks/git.lock`, a leaf
lock taken after the scope locks (global → project) and never held while waiting
for one. Under it, any `*.lock` file git left in the repository is a leftover of a
killed process and is removed. Hooks (`after_write`, `after_swap`, `after_index`)
never raise into the write path: a failed commit is logged and the next index run
or sync commits the change.

Commits: one per history run of a scope (`Recorder.commit`), so a write that changed
the drawer and a project is two commits sharing one `Memd-Run`; one per dream swap;
one per index run that finds hand edits (authored by the user, committed by memd).

Crash safety: objects are written before the ref moves, and the ref only moves
forward (fast-import's check, or `update-ref <new> <old>` for a fast-forward); a
`kill -9` anywhere leaves `main` on a complete commit.
Files a sync wrote into a memory directory before the ref moved are seen by the
next scan as local changes and committed; the merge that follows finds them equal
on both sides.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memd.errors import BusyError, MemdError
from memd.fsutil import atomic_write, ensure_private_dir, fsync_dir
from memd.logs import lazy_logger
from memd.tree import Home, Place

if TYPE_CHECKING:
    import subprocess

log = lazy_logger("memd.gitmem")

BRANCH = "main"
REF = f"refs/heads/{BRANCH}"
REMOTE = "origin"
REMOTE_REF = f"refs/remotes/{REMOTE}/{BRANCH}"
MANIFEST = "manifest.json"
GLOBAL_DIR = "global"
PROJECTS_DIR = "projects"
STATE_FILE = "gitmem.json"
LOCK_FILE = "git.lock"
FILE_MODE = "100644"
MAX_FILE_BYTES = 1024 * 1024
MEMD_NAME = "memd"
GC_EVERY = 200
_TEMP_SUFFIXES = (".tmp", ".swp", ".swo", ".swx", "~", ".bak", ".orig", ".part")
# Variables a caller's shell (or a git hook memd runs from) may set that would point git elsewhere.
_GIT_LOCATION_VARS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR",
                      "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_PREFIX")  # fmt: skip


class GitError(MemdError):
    """A git command failed; the message is git's own first line."""


class GitBusy(BusyError):
    """Another memd process holds the repository (`memd/locks/git.lock`) longer than the caller may wait."""


# --------------------------------------------------------------------------- small pure helpers


Entries = dict[str, tuple[str, str]]  # a tree, flat: path → (mode, object id)


def blob_sha(data: bytes) -> str:
    """The object id git gives these bytes (so unchanged files need no git process)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def is_memory_name(name: str) -> bool:
    """A file git tracks: a visible `.md` that is not the index nor an editor's temporary."""
    return (name.endswith(".md") and name != "MEMORY.md" and not name.startswith((".", "#"))
            and not name.endswith(_TEMP_SUFFIXES) and "\n" not in name and "/" not in name)  # fmt: skip


def host_name() -> str:
    """This machine's name in commit trailers and conflict copies (`$MEMD_HOST`, else the host name)."""
    import socket

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


def dir_files(entries: Entries, d: str) -> dict[str, str]:
    """The memory files of one directory of a tree: name → object id."""
    out: dict[str, str] = {}
    for p, (_mode, sha) in entries.items():
        sp = split_path(p)
        if sp is not None and sp[0] == d:
            out[sp[1]] = sha
    return out


def message(subject: str, trailers: dict[str, str], body: str = "") -> str:
    """A commit message: the subject, an optional body, `Memd-*` trailers; redacted like a log line
    (a reason could quote what a user said, and commit messages are pushed)."""
    from memd.redact import redact

    lines = [" ".join(subject.split())[:200] or "memd", ""]
    if body:
        lines += [body.rstrip(), ""]
    lines += [f"{k}: {' '.join(str(v).split())}" for k, v in trailers.items() if v]
    return redact("\n".join(lines) + "\n")


# --------------------------------------------------------------------------- the git command line


@dataclass
class Git:
    """git on one repository; every call is one process, output read whole."""

    git_dir: Path

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _GIT_LOCATION_VARS}
        env["GIT_DIR"] = str(self.git_dir)
        env["GIT_TERMINAL_PROMPT"] = "0"  # a daemon never waits on a password prompt
        env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes -o ConnectTimeout=20")
        env["LC_ALL"] = "C"
        env.update(extra or {})
        return env

    def run(self, *args: str, input: bytes | None = None, env: dict[str, str] | None = None,
            ok: tuple[int, ...] = (0,), timeout: float = 120.0) -> subprocess.CompletedProcess[bytes]:  # fmt: skip
        import subprocess

        cmd = ["git", "-c", "core.hooksPath=/dev/null", "-c", "gc.autoDetach=false", *args]
        try:
            p = subprocess.run(cmd, input=input, capture_output=True, env=self.env(env), timeout=timeout, check=False)
        except FileNotFoundError:
            raise GitError("git is not installed (memd.git needs the `git` command)") from None
        except subprocess.TimeoutExpired:
            raise GitError(f"git {args[0]}: no answer within {timeout:.0f} s") from None
        if p.returncode not in ok:
            raise GitError(f"git {args[0]}: {first_line(p.stderr) or f'exit {p.returncode}'}")
        return p

    def rev(self, ref: str) -> str | None:
        p = self.run("rev-parse", "--verify", "-q", f"{ref}^{{commit}}", ok=(0, 1, 128))
        return p.stdout.decode().strip() or None if p.returncode == 0 else None

    def tree(self, commit: str | None) -> Entries:
        """A commit's tree, flat. Commits never change, so the last few are kept in memory (a
        daemon's consecutive writes then cost one git process each)."""
        if not commit:
            return {}
        with _trees_mu:
            hit = _trees.get((str(self.git_dir), commit))
        if hit is not None:
            return dict(hit)
        out: Entries = {}
        for rec in self.run("ls-tree", "-r", "-z", "--full-tree", commit).stdout.split(b"\0"):
            if not rec:
                continue
            meta, _, path = rec.partition(b"\t")
            mode, _kind, sha = meta.decode().split(" ")
            out[path.decode("utf-8", "surrogateescape")] = (mode, sha)
        _remember_tree(str(self.git_dir), commit, out)
        return dict(out)

    def cat(self, shas: Iterable[str]) -> dict[str, bytes]:
        want = sorted(set(shas))
        if not want:
            return {}
        raw = self.run("cat-file", "--batch", input="".join(f"{s}\n" for s in want).encode()).stdout
        out: dict[str, bytes] = {}
        pos = 0
        for sha in want:
            nl = raw.index(b"\n", pos)
            head = raw[pos:nl].decode().split()
            if len(head) != 3:
                raise GitError(f"git cat-file: object {sha} is missing")
            size = int(head[2])
            out[sha] = raw[nl + 1 : nl + 1 + size]
            pos = nl + 1 + size + 1
        return out

    def read_ref(self, ref: str) -> str | None:
        """A ref's value from the files (a loose ref, else packed-refs): no process for the hot path."""
        try:
            value = (self.git_dir / ref).read_text(encoding="ascii").strip()
            if re.fullmatch(r"[0-9a-f]{40}", value):
                return value
        except (OSError, UnicodeDecodeError):
            pass
        try:
            for line in (self.git_dir / "packed-refs").read_text(encoding="utf-8").splitlines():
                sha, _, name = line.partition(" ")
                if name == ref and re.fullmatch(r"[0-9a-f]{40}", sha):
                    return sha
        except (OSError, UnicodeDecodeError):
            pass
        return None

    def fast_commit(self, parent: str | None, merge: str | None, old: Entries, new: Entries, puts: dict[str, bytes],
                    msg: str, author: tuple[str, str], committer: tuple[str, str], ref: str = REF) -> str:  # fmt: skip
        """One commit of tree `new` (on top of `parent`, whose tree is `old`) in one `git fast-import`.

        New file contents come from `puts` (the exact bytes memd scanned), the rest
        from objects already in the repository. fast-import writes the objects (a
        pack for a big commit, loose objects for a small one) and moves `ref` only
        if the result contains its current value; under `git.lock` that is `parent`.
        """
        now = int(time.time())
        buf = io.BytesIO()
        w = buf.write
        w(b"commit " + ref.encode() + b"\nmark :1\n")
        w(f"author {_ident(author)} {now} +0000\ncommitter {_ident(committer)} {now} +0000\n".encode())
        data = msg.encode("utf-8")
        w(b"data %d\n" % len(data) + data + b"\n")
        if parent:
            w(b"from " + parent.encode() + b"\n")
        if merge:
            w(b"merge " + merge.encode() + b"\n")
        for path in sorted(set(old) - set(new)):
            w(b"D " + _fi_path(path) + b"\n")
        for path, (mode, sha) in sorted(new.items()):
            if path in puts:
                w(b"M " + mode.encode() + b" inline " + _fi_path(path) + b"\ndata %d\n" % len(puts[path]) + puts[path] + b"\n")
            elif old.get(path) != (mode, sha):
                w(b"M " + mode.encode() + b" " + sha.encode() + b" " + _fi_path(path) + b"\n")
        w(b"get-mark :1\n")
        p = self.run("fast-import", "--quiet", "--date-format=raw", input=buf.getvalue(), ok=(0, 1))
        sha = p.stdout.decode().strip().splitlines()[-1] if p.stdout.strip() else ""
        if p.returncode != 0 or self.read_ref(ref) != sha:
            raise GitError(f"git fast-import: {first_line(p.stderr) or 'the branch did not move'}")
        _remember_tree(str(self.git_dir), sha, new)
        return sha

    def update_ref(self, new: str, old: str | None, why: str, ref: str = REF) -> None:
        self.run("update-ref", "-m", why[:200], ref, new, old or "0" * 40)

    def merge_base(self, a: str, b: str) -> str | None:
        p = self.run("merge-base", a, b, ok=(0, 1))
        return p.stdout.decode().strip() or None

    def is_ancestor(self, a: str, b: str) -> bool:
        return self.run("merge-base", "--is-ancestor", a, b, ok=(0, 1)).returncode == 0

    def counts(self, a: str, b: str) -> tuple[int, int]:
        """(commits only in a, commits only in b)."""
        left, right = self.run("rev-list", "--left-right", "--count", f"{a}...{b}").stdout.decode().split()
        return int(left), int(right)

    def host_of(self, path: str, tip: str, since: str | None) -> str:
        """The machine that last changed `path` on `tip` (after `since`), from the Memd-Host trailer."""
        rng = f"{since}..{tip}" if since else tip
        p = self.run("log", "-1", "--format=%(trailers:key=Memd-Host,valueonly,separator=%x2C)", rng, "--", path,
                     ok=(0, 128))  # fmt: skip
        host = first_line(p.stdout).split(",")[0].strip()
        return re.sub(r"[^A-Za-z0-9-]+", "-", host).strip("-")[:40] or "other"


    def hosts_between(self, tip: str, exclude: str | None) -> list[str]:
        """The machines (Memd-Host trailers) of the commits on `tip` that `exclude` lacks."""
        args = ["log", "--format=%(trailers:key=Memd-Host,valueonly,separator=%x2C)", tip]
        if exclude:
            args += ["--not", exclude]
        out = self.run(*args).stdout.decode("utf-8", "replace")
        return sorted({h.strip() for line in out.splitlines() for h in line.split(",") if h.strip()})


_trees: dict[tuple[str, str], Entries] = {}
_trees_mu = threading.Lock()
_TREES_KEPT = 8


def _remember_tree(git_dir: str, commit: str, entries: Entries) -> None:
    with _trees_mu:
        _trees[(git_dir, commit)] = dict(entries)
        while len(_trees) > _TREES_KEPT:
            _trees.pop(next(iter(_trees)))


def _ident(who: tuple[str, str]) -> str:
    name = re.sub(r"[<>\n]+", " ", who[0]).strip() or "memd"
    email = re.sub(r"[<>\s]+", "", who[1]) or "memd@localhost"
    return f"{name} <{email}>"


def _fi_path(path: str) -> bytes:
    """A path as fast-import reads it: C-quoted when it holds a quote, a backslash or a line break."""
    raw = path.encode("utf-8", "surrogateescape")
    if not any(c in path for c in '"\\\n') and not path.startswith('"'):
        return raw
    return b'"' + raw.replace(b"\\", b"\\\\").replace(b'"', b'\\"').replace(b"\n", b"\\n") + b'"'


def first_line(data: bytes | str) -> str:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("hint:"):
            return line.removeprefix("fatal: ").removeprefix("error: ")[:300]
    return ""


# --------------------------------------------------------------------------- settings, suppression


_settings_cache: dict[Path, tuple[tuple[int, int, int], Any]] = {}
_quiet = threading.local()


def load_settings(home: Home) -> Any:
    """The home's settings, re-read only when the file changed (hooks run on every write)."""
    from memd import settings as st

    try:
        s = home.settings_file.stat()
        sig = (s.st_mtime_ns, s.st_size, s.st_ino)
    except OSError:
        return st.defaults()
    hit = _settings_cache.get(home.root)
    if hit is not None and hit[0] == sig:
        return hit[1]
    loaded = st.load(home.settings_file)
    _settings_cache[home.root] = (sig, loaded)
    return loaded


def enabled(settings: Any) -> bool:
    try:
        return bool(settings.get("memd.git"))
    except (KeyError, TypeError):
        return False


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Writes inside a sync or an import already under the git lock: the hooks stay out of the way."""
    before = getattr(_quiet, "on", False)
    _quiet.on = True
    try:
        yield
    finally:
        _quiet.on = before


def _is_quiet() -> bool:
    return bool(getattr(_quiet, "on", False))


# --------------------------------------------------------------------------- the repository


@dataclass
class Commit:
    """What a commit took in: its id, the files staged and those refused."""

    sha: str | None
    changed: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    written: dict[Place, list[str]] = field(default_factory=dict)  # files written into live directories


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
        from filelock import FileLock, Timeout

        from memd.locks import ensure_locks_dir

        path = ensure_locks_dir(self.home) / LOCK_FILE
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
        if self.exists():
            return
        ensure_private_dir(self.git.git_dir.parent)
        self.git.run("init", "-q", "--bare", "-b", BRANCH, str(self.git.git_dir))
        # A bare repository keeps no reflog by default; memd's users may need one to repair by hand.
        self.git.run("config", "core.logAllRefUpdates", "always")
        self.git.run("config", "memd.layout", "1")
        os.chmod(self.git.git_dir, 0o700)
        log.info("git.initialised", repository=str(self.git.git_dir))

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
               settings: Any = None, exclude: dict[Place, set[str]] | None = None) -> Commit:  # fmt: skip
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
            self._scan_place(d, place.memory_dir(self.home), new, None if names is None else names.get(place, set()),
                             puts, out, (exclude or {}).get(place, set()))  # fmt: skip
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

    def ensure_initial(self, settings: Any, exclude: dict[Place, set[str]] | None = None) -> None:
        """The first commit takes in the drawer and every project memory directory as they are
        (but `exclude`: a write's own files, which get their own commit next). *locked*"""
        if self.git.read_ref(REF) is not None:
            return
        from memd.tree import list_memory_dirs

        places = [Place.memory(key) for _s, key, _p in list_memory_dirs(self.home)]
        self.commit(places, subject="memd: start keeping memory in git", settings=settings, exclude=exclude,
                    trailers={"Memd-Job": "init"})  # fmt: skip

    def refresh_primary(self) -> dict[str, str]:
        """dir → the local key synced with it, over every local project. *locked*"""
        from memd.tree import list_project_keys

        return self.primary_keys(list_project_keys(self.home))

    def local_places(self) -> list[Place]:
        """The drawer and every local project that is the primary checkout of its identity. *locked*"""
        return [Place.global_(), *(Place.project(k) for k in sorted(self.refresh_primary().values()))]

    def _scan_place(self, d: str, live: Path, new: Entries, wanted: set[str] | None,
                    puts: dict[str, bytes], out: Commit, exclude: set[str]) -> None:  # fmt: skip
        """Stage the live files of one directory into `new` (secrets refused), deletions included."""
        from memd.redact import find_secrets

        present: dict[str, Path] = {}
        if wanted is None:
            try:
                with os.scandir(live) as it:
                    for e in it:
                        if is_memory_name(e.name) and e.is_file(follow_symlinks=False):
                            present[e.name] = Path(e.path)
            except OSError:
                pass
            names = set(present) | set(dir_files(new, d))
        else:
            names = {n for n in wanted if is_memory_name(n)}
            for n in names:
                p = live / n
                if p.is_file() and not p.is_symlink():
                    present[n] = p
        refused = self.state["refused"]
        for name in sorted(names - exclude):
            path = f"{d}/{name}"
            if name not in present:
                if path in new:
                    del new[path]
                    out.changed.append(path)
                refused.pop(path, None)
                continue
            try:
                data = _read_capped(present[name])
            except OSError:
                continue
            if data is None:
                self._refuse(path, present[name], "larger than 1 MB", out)
                continue
            sha = blob_sha(data)
            if new.get(path, ("", ""))[1] == sha:
                refused.pop(path, None)
                continue
            found = sorted({rule for rule, _span in find_secrets(data.decode("utf-8", "replace"))})
            if found:
                self._refuse(path, present[name], "holds what looks like a secret (" + ", ".join(found) + ")", out)
                continue
            refused.pop(path, None)
            new[path] = (FILE_MODE, sha)
            puts[path] = data  # exactly the bytes that were scanned
            out.changed.append(path)

    def _refuse(self, path: str, file: Path, why: str, out: Commit) -> None:
        prev = self.state["refused"].get(path)
        self.state["refused"][path] = {"file": str(file), "reason": why,
                                       "since": (prev or {}).get("since") or _now_iso()}  # fmt: skip
        out.refused[str(file)] = why
        if not prev or prev.get("reason") != why:
            log.warning("git.file_refused", file=str(file), reason=why)

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

    def _materialize(self, place: Place, d: str, tree: Entries, head: str | None, settings: Any) -> list[str]:
        """A project seen on another machine first: its memories land in this machine's directory.

        Files absent here are written; a file of the same name with other content
        here is kept and the repository's version lands beside it, renamed.
        """
        live = place.memory_dir(self.home)
        files = dir_files(tree, d)
        blobs = self.git.cat(files.values())
        writes: dict[str, bytes | None] = {}
        taken = set(files)
        with contextlib.suppress(OSError):
            taken |= set(os.listdir(live))
        for name, sha in sorted(files.items()):
            cur = _read_capped(live / name) if (live / name).is_file() else None
            if cur is None:
                writes[name] = blobs[sha]
            elif blob_sha(cur) != sha:
                other = free_name(name, f"-{self.git.host_of(f'{d}/{name}', head or REF, None)}", taken)
                taken.add(other)
                writes[other] = blobs[sha]
        identity = self.state["projects"][place.key or ""]["identity"]
        return write_live(self.home, place, writes, job="sync",
                          reason=f"memories of {identity} from the repository (first linked on this machine)",
                          settings=settings)  # fmt: skip


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


def write_live(home: Home, place: Place, writes: dict[str, bytes | None], *, job: str, reason: str,
               settings: Any = None, extra: dict[str, Any] | None = None,
               mtimes: dict[str, int] | None = None) -> list[str]:  # fmt: skip
    """Write (bytes) or delete (None) memory files of one live directory as one history run.

    The caller holds the place's scope lock. The run is undoable like any write
    (`memd undo`); the git hooks stay quiet (the caller commits).
    """
    import tempfile

    from memd.changes import Recorder
    from memd.clock import system_clock

    if not writes:
        return []
    live = place.memory_dir(home)
    if live.is_symlink():
        log.warning("git.symlink_skipped", dir=str(live))
        return []
    rec = Recorder(home, place, job, reason, system_clock(), extra=extra or {})
    done: list[str] = []
    staged: list[tuple[str, str, Path]] = []
    try:
        for name, data in sorted(writes.items()):
            target = live / name
            if not is_memory_name(name) or target.is_symlink():
                continue
            rec.before(target)
            if data is None:
                if target.exists():
                    target.unlink()
                    done.append(name)
                continue
            # Each file is replaced atomically (temporary file, fsync, rename) as atomic_write does;
            # the directory is fsynced once for the whole batch (a first pull writes hundreds).
            ensure_private_dir(live)
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=live)
            staged.append((name, tmp, target))
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o600)
        for name, tmp, target in staged:
            os.replace(tmp, target)
            if mtimes and name in mtimes:
                os.utime(target, ns=(mtimes[name], mtimes[name]))
            done.append(name)
        staged = []
    finally:
        for _name, tmp, _target in staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    if done:
        fsync_dir(live)
    with quiet():
        rec.commit()
    if settings is not None and done:
        from memd.history import refresh_scope

        refresh_scope(home, settings, place, system_clock())
    return done


def _read_capped(path: Path) -> bytes | None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        chunks, left = [], MAX_FILE_BYTES + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return None if len(data) > MAX_FILE_BYTES else data


def _now_iso() -> str:
    from memd.clock import iso, system_clock

    return iso(system_clock())


def _dir_stamp(home: Home, key: str) -> int:
    try:
        return home.project_dir(key).stat().st_mtime_ns
    except OSError:
        return 0


_user: tuple[str, str] | None = None


def user_identity(host: str) -> tuple[str, str]:
    """Who a hand edit is attributed to: git's author variables, else the user's git identity, else the login."""
    global _user
    name, email = os.environ.get("GIT_AUTHOR_NAME"), os.environ.get("GIT_AUTHOR_EMAIL")
    if name and email:
        return name, email
    if _user is None:
        import subprocess

        got = []
        for k in ("user.name", "user.email"):
            try:
                p = subprocess.run(["git", "config", "--get", k], capture_output=True, timeout=10, check=False,
                                   env={k2: v for k2, v in os.environ.items() if k2 not in _GIT_LOCATION_VARS})  # fmt: skip
                got.append(p.stdout.decode("utf-8", "replace").strip())
            except (OSError, subprocess.TimeoutExpired):
                got.append("")
        login = _login()
        _user = (got[0] or login, got[1] or f"{login}@{host}")
    return (name or _user[0], email or _user[1])


def _login() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "user"


def resolve_identity(home: Home, key: str) -> tuple[str, str | None]:
    """A project's identity: the normalised remote URL of its repository, else `key:<key>`.

    The repository is found from the working directory the project's transcripts
    record (the key itself cannot be turned back into a path): the newest
    sessions first, keeping a root whose key is this key.
    """
    from memd.tree import canonical_root, key_for_root, session_cwd

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
    import subprocess

    try:
        p = subprocess.run(["git", "-C", str(root), "config", "--get-regexp", r"^remote\..*\.url$"],
                           capture_output=True, timeout=10, check=False,
                           env={k: v for k, v in os.environ.items() if k not in _GIT_LOCATION_VARS})  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    urls: dict[str, str] = {}
    for line in p.stdout.decode("utf-8", "replace").splitlines():
        k, _, v = line.partition(" ")
        urls[k[len("remote.") : -len(".url")]] = v.strip()
    return urls.get("origin") or (urls[sorted(urls)[0]] if urls else None)


# --------------------------------------------------------------------------- the hooks


def _lock_timeout(settings: Any) -> float:
    try:
        return float(settings.get("memd.lockTimeoutSeconds"))
    except (KeyError, TypeError, ValueError):
        return 10.0


def _guarded(what: str, fn: Callable[[], None]) -> None:
    """A hook never breaks the write it follows: the next index run or sync commits what it missed."""
    try:
        fn()
    except GitBusy as exc:
        log.info("git.commit_deferred", hook=what, reason=str(exc))
    except Exception as exc:
        log.warning("git.commit_failed", hook=what, reason=str(exc))


def _scope_trailer(place: Place) -> str:
    return str(place)


def after_write(home: Home, place: Place, info: dict[str, Any]) -> None:
    """After a history write run (`Recorder.commit`): its files as one commit naming run, job and reason."""
    if _is_quiet():
        return
    settings = load_settings(home)
    if not enabled(settings):
        return

    def go() -> None:
        files = set((info.get("files") or {}).keys())
        counts = ", ".join(f"{len(v)} {k}" for k, v in (info.get("changes") or {}).items() if v)
        subject = f"{info.get('job') or 'write'}: {info.get('reason') or ''} ({counts or 'no change'})"
        with Repo(home).locked(_lock_timeout(settings)) as repo:
            repo.ensure_initial(settings, exclude={place: files})
            repo.commit([place], names={place: files}, subject=subject, trailers={
                "Memd-Run": str(info.get("run") or ""), "Memd-Job": str(info.get("job") or ""),
                "Memd-Scope": _scope_trailer(place)})  # fmt: skip

    _guarded("write", go)


def after_swap(home: Home, place: Place, run_id: str) -> None:
    """After a dream (or a dream undo) swapped a whole directory in: one commit of that directory."""
    if _is_quiet():
        return
    settings = load_settings(home)
    if not enabled(settings):
        return

    def go() -> None:
        from memd.history import history_root, read_run

        info = read_run(history_root(home, place) / run_id) or {}
        kind = str(info.get("kind") or "dream")
        counts = ", ".join(f"{len(v)} {k}" for k, v in (info.get("changes") or {}).items() if isinstance(v, list) and v)
        what = f"undo of {info.get('undo_of')}" if kind == "undo" else f"consolidation ({info.get('provider') or '?'})"
        with Repo(home).locked(_lock_timeout(settings)) as repo:
            repo.ensure_initial(settings)
            repo.commit([place], subject=f"{kind}: {what} ({counts or 'no change'})", materialize=True,
                        settings=settings, trailers={"Memd-Run": run_id, "Memd-Job": kind,
                                                     "Memd-Scope": _scope_trailer(place)})  # fmt: skip

    _guarded("swap", go)


def after_index(home: Home, place: Place, settings: Any) -> None:
    """The index job's turn: whatever changed by hand in this directory, as the user's commit."""
    if _is_quiet() or not enabled(settings):
        return

    def go() -> None:
        with Repo(home).locked(_lock_timeout(settings)) as repo:
            repo.ensure_initial(settings)
            repo.commit([place], subject=f"hand edits in {place}", user=True, materialize=True, settings=settings,
                        trailers={"Memd-Job": "hand-edit", "Memd-Scope": _scope_trailer(place)})  # fmt: skip

    _guarded("index", go)
