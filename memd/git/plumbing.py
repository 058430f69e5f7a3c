"""The git command line, as the memory repository uses it (the design: `memd.git.commits`).

`Git` runs one git process a call on the bare repository and reads its output
whole: refs, trees (the last few kept in memory: commits never change, so a
daemon's consecutive writes cost one git process each), blobs, and commits built
with `git fast-import` from the exact bytes memd scanned. Also here: the object id
git gives bytes (`blob_sha`), commit messages with their `Memd-*` trailers, and
who a hand edit is attributed to. Why the command line and not a library: `memd.git.commits`.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from memd.errors import ConfigError, MemdError

if TYPE_CHECKING:
    import subprocess

BRANCH = "main"
REF = f"refs/heads/{BRANCH}"
REMOTE = "origin"
REMOTE_REF = f"refs/remotes/{REMOTE}/{BRANCH}"
# Variables a caller's shell (or a git hook memd runs from) may set that would point git elsewhere.
GIT_LOCATION_VARS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR",
                     "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_PREFIX")  # fmt: skip


class GitError(MemdError):
    """A git command failed; the message is git's own first line."""


Entries = dict[str, tuple[str, str]]  # a tree, flat: path → (mode, object id)


def blob_sha(data: bytes) -> str:
    """The object id git gives these bytes (so unchanged files need no git process)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def message(subject: str, trailers: dict[str, str], body: str = "") -> str:
    """A commit message: the subject, an optional body, `Memd-*` trailers; redacted like a log line
    (a reason could quote what a user said, and commit messages are pushed). A token-shaped word in the
    subject (a secret no rule knows, `memd.redact.shapes`) is dropped too: the subject is derived text."""

    from memd.redact.redactor import redact  # noqa: PLC0415 - start-up
    from memd.redact.shapes import mask_tokens  # noqa: PLC0415 - start-up

    lines = [mask_tokens(redact(" ".join(subject.split())))[:200] or "memd", ""]  # known secrets first, by name
    if body:
        lines += [body.rstrip(), ""]
    lines += [f"{k}: {' '.join(str(v).split())}" for k, v in trailers.items() if v]
    return redact("\n".join(lines) + "\n")


@dataclass
class Git:
    """git on one repository; every call is one process, output read whole."""

    git_dir: Path

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in GIT_LOCATION_VARS}
        env["GIT_DIR"] = str(self.git_dir)
        env["GIT_TERMINAL_PROMPT"] = "0"  # a daemon never waits on a password prompt
        env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes -o ConnectTimeout=20 -o ServerAliveInterval=10 "
                       "-o ServerAliveCountMax=3")  # a server that stops answering is dropped after 30 s
        env["LC_ALL"] = "C"
        env.update(extra or {})
        return env

    def run(self, *args: str, input: bytes | None = None, env: dict[str, str] | None = None,
            ok: tuple[int, ...] = (0,), timeout: float = 120.0) -> subprocess.CompletedProcess[bytes]:  # fmt: skip
        cmd = ["git", "-c", "core.hooksPath=/dev/null", "-c", "gc.autoDetach=false", *args]
        import subprocess  # noqa: PLC0415 - start-up
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

    def sizes(self, shas: Iterable[str]) -> dict[str, int]:
        """Each object's size without reading it (`cat-file --batch-check`); a missing object is absent."""
        want = sorted(set(shas))
        if not want:
            return {}
        out: dict[str, int] = {}
        raw = self.run("cat-file", "--batch-check", input="".join(f"{s}\n" for s in want).encode()).stdout
        for line in raw.decode("ascii", "replace").splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[2].isdigit():
                out[parts[0]] = int(parts[2])
        return out

    def cat_capped(self, shas: Iterable[str], cap: int) -> tuple[dict[str, bytes], dict[str, int]]:
        """(blobs of at most `cap` bytes, sizes of the larger or missing ones, never read: -1 when missing).
        An incoming 200 MB blob is never read into memory."""
        want = set(shas)
        sizes = self.sizes(want)
        small = {s for s in want if 0 <= sizes.get(s, -1) <= cap}
        return self.cat(small), {s: sizes.get(s, -1) for s in want - small}

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


_user: tuple[str, str] | None = None


def user_identity(host: str) -> tuple[str, str]:
    """Who a hand edit is attributed to: git's author variables, else the user's git identity, else the login."""
    global _user
    name, email = os.environ.get("GIT_AUTHOR_NAME"), os.environ.get("GIT_AUTHOR_EMAIL")
    if name and email:
        return name, email
    if _user is None:
        got = []
        import subprocess  # noqa: PLC0415 - start-up
        for k in ("user.name", "user.email"):
            try:
                p = subprocess.run(["git", "config", "--get", k], capture_output=True, timeout=10, check=False,
                                   env={k2: v for k2, v in os.environ.items() if k2 not in GIT_LOCATION_VARS})  # fmt: skip
                got.append(p.stdout.decode("utf-8", "replace").strip())
            except (OSError, subprocess.TimeoutExpired):
                got.append("")
        login = _login()
        _user = (got[0] or login, got[1] or f"{login}@{host}")
    return (name or _user[0], email or _user[1])


def _login() -> str:
    try:
        import getpass  # noqa: PLC0415 - start-up
        return getpass.getuser()
    except (KeyError, OSError):
        return "user"


class SyncError(MemdError):
    """error: the sync could not finish (remote unreachable, refused push); local work goes on."""


class SyncNotConfigured(ConfigError):
    """configuration: memd.git is off, or memd.sync.remote is not set."""
