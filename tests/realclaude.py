"""A real Claude Code binary as test equipment, run against a loopback fake API.

- `ensure_claude()` installs `@anthropic-ai/claude-code` with npm, once per
  machine, into `~/.cache/memd-test/claude-code/` (outside the repo; override
  the cache root with `MEMD_TEST_CACHE`, pin a version with
  `MEMD_CLAUDE_VERSION`, which installs into `claude-code@<version>/`), and
  reuses it afterwards without touching the network. `MEMD_CLAUDE_BIN` names a
  binary to use instead. An install holds a file lock, so parallel test
  processes wait for one another instead of installing twice.
  `claude_or_skip()` is the same for tests: `pytest.skip` with the reason when
  npm is missing, the registry unreachable, or the binary does not run.
- `run_claude(prompt, cwd, config_dir, base_url)` runs `claude -p PROMPT` with a
  scrubbed environment: `CLAUDE_CONFIG_DIR`, `ANTHROPIC_BASE_URL` (the fake, see
  tests/fakeapi.py, which streams when asked), an API key, HOME in a temp dir,
  and the switches that keep Claude Code off the network (no telemetry, no
  auto-update, no bootstrap/registry fetches from api.anthropic.com).
- `claude_key(path)` is Claude Code's project directory name for a path
  (`projects/<key>/`), `claude_memory_root(cwd)` the directory whose key holds
  the auto-memory (`projects/<key>/memory/MEMORY.md`): the canonical git root,
  which for a linked worktree is the main repository's root.

Observed with Claude Code 2.1.197 and 2.1.332 (tests/e2e/agents/ check them
against the binary): transcripts go to
`<config>/projects/<claude_key(realpath(cwd))>/<session>.jsonl`; auto-memory is
read from `<config>/projects/<claude_key(claude_memory_root(realpath(cwd)))>/memory/MEMORY.md`;
user settings are `<config>/settings.json` (strict JSON). To read a long key
back, 2.1.197 also accepts any `projects/` directory with the same first 200
characters + `-` (whatever the hash), so match long keys by that prefix too.

A run is quick (about 0.5-1 s against the fake). Install: `npm install` of the
package; the native binary comes as the optional platform package
`@anthropic-ai/claude-code-<os>-<arch>` (about 240-380 MB on disk).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = [
    "ClaudeInstall",
    "ClaudeRun",
    "ClaudeUnavailable",
    "cache_dir",
    "claude_env",
    "claude_key",
    "claude_memory_key",
    "claude_memory_root",
    "claude_or_skip",
    "ensure_claude",
    "git_root",
    "run_claude",
]

PACKAGE = "@anthropic-ai/claude-code"
INSTALL_TIMEOUT = float(os.environ.get("MEMD_CLAUDE_INSTALL_TIMEOUT", "900"))
LOCK_TIMEOUT = INSTALL_TIMEOUT + 60
_STAMP = ".memd-installed"
MAX_KEY = 200  # Claude Code keeps this many characters of a long key, then adds a hash


class ClaudeUnavailable(RuntimeError):
    """Claude Code cannot be installed or run here; the message says why."""


@dataclass(frozen=True)
class ClaudeInstall:
    bin: Path
    version: str  # e.g. "2.1.197 (Claude Code)"

    @property
    def semver(self) -> str:
        return self.version.split()[0] if self.version else ""


# --- install ------------------------------------------------------------------------


def cache_dir() -> Path:
    """Where npm installs Claude Code: `<MEMD_TEST_CACHE or ~/.cache/memd-test>/claude-code[@version]`."""
    root = Path(os.environ.get("MEMD_TEST_CACHE") or Path.home() / ".cache" / "memd-test")
    pinned = os.environ.get("MEMD_CLAUDE_VERSION", "").strip()
    return root / (f"claude-code@{pinned}" if pinned else "claude-code")


def _platform_package() -> str:
    system = {"Linux": "linux", "Darwin": "darwin", "Windows": "win32"}.get(platform.system(), platform.system().lower())
    machine = platform.machine().lower()
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)
    musl = system == "linux" and not any(Path("/lib").glob("libc.so*")) and any(Path("/lib").glob("ld-musl-*"))
    return f"claude-code-{system}-{arch}{'-musl' if musl else ''}"


def _candidates(prefix: Path) -> list[Path]:
    """Executables an install may hold, best first.

    Newer releases ship the native binary as an optional platform package
    (`@anthropic-ai/claude-code-<os>-<arch>/claude`) that the main package's
    postinstall links to `bin/claude.exe`; older ones ran `cli.js` with node.
    `node_modules/.bin/claude` points at whichever the package declares.
    """
    mods = prefix / "node_modules" / "@anthropic-ai"
    out = [mods / _platform_package() / "claude", mods / "claude-code" / "bin" / "claude.exe", prefix / "node_modules" / ".bin" / "claude"]
    out += sorted(mods.glob("claude-code-*/claude"))
    seen: list[Path] = []
    for p in out:
        if p not in seen:
            seen.append(p)
    return seen


def _version_of(binary: Path, timeout: float = 60) -> str:
    """`claude --version`, or raise ClaudeUnavailable saying why it did not run."""
    try:
        with tempfile.TemporaryDirectory(prefix="memd-claude-version-") as tmp:
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tmp, "CLAUDE_CONFIG_DIR": tmp, **QUIET_ENV}
            done = subprocess.run([str(binary), "--version"], check=False, capture_output=True, text=True, timeout=timeout, env=env,
                                  stdin=subprocess.DEVNULL, cwd=tmp)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ClaudeUnavailable(f"{binary} --version did not run: {exc}") from exc
    out = done.stdout.strip()
    if done.returncode != 0 or "claude" not in out.lower():
        said = (done.stderr or done.stdout).strip()
        raise ClaudeUnavailable(f"{binary} --version exited {done.returncode} saying {said[:300]!r}, not a Claude Code version")
    return out.splitlines()[-1]


def _working_binary(prefix: Path) -> ClaudeInstall | None:
    for cand in _candidates(prefix):
        if cand.is_file() and os.access(cand, os.X_OK):
            try:
                return ClaudeInstall(cand, _version_of(cand))
            except ClaudeUnavailable:
                continue
    return None


def _npm(npm: str, args: list[str], cwd: Path, timeout: float) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of an npm command; -1 when it did not finish."""
    try:
        done = subprocess.run([npm, *args], check=False, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return -1, "", f"timed out after {timeout:.0f}s"
    except OSError as exc:
        return -1, "", str(exc)
    return done.returncode, done.stdout.strip(), done.stderr.strip()


def _npm_error(text: str) -> str:
    """The telling lines of npm's error output."""
    lines = [ln.removeprefix("npm error").strip() for ln in text.splitlines()]
    keep = [ln for ln in lines if ln and not ln.startswith(("at ", "A complete log", "If you are behind"))]
    return " | ".join(keep[:6])[:500]


def _npm_install(prefix: Path, npm: str) -> None:
    """`npm install` the package into `prefix`; offline, from npm's own cache if it can.

    A quick registry look-up first (no retries), so an offline machine skips
    in seconds rather than after npm's minute of retries.
    """
    pinned = os.environ.get("MEMD_CLAUDE_VERSION", "").strip()
    spec = f"{PACKAGE}@{pinned}" if pinned else PACKAGE
    prefix.mkdir(parents=True, exist_ok=True)
    quiet = ["--no-audit", "--no-fund", "--no-update-notifier", "--loglevel=error"]
    code, out, err = _npm(npm, ["view", spec, "version", "--fetch-retries=0", "--fetch-timeout=20000", *quiet], prefix, 60)
    online = code == 0
    if online and re.fullmatch(r"\d+\.\d+\.\d+\S*", out):
        # what the registry calls it now, not what a stale npm metadata cache resolves
        spec = f"{PACKAGE}@{out}"
    install = ["install", "--prefix", str(prefix), *quiet, spec]
    if not online:
        install.insert(1, "--offline")  # npm's cache may still hold it
    why = "" if online else f"registry unreachable ({_npm_error(err or out)}); offline install: "
    code, out, err = _npm(npm, install, prefix, INSTALL_TIMEOUT if online else 120)
    if code != 0:
        raise ClaudeUnavailable(f"`npm install {spec}` failed: {why}{_npm_error(err or out)}")


_OUTCOME: dict[str, ClaudeInstall | ClaudeUnavailable] = {}


def ensure_claude() -> ClaudeInstall:
    """A runnable Claude Code, installing it into the cache on first use.

    Raises ClaudeUnavailable with the reason when it cannot be had. The
    outcome, either way, is kept for the life of the process (so an offline
    machine tries npm once, not once a test); `ensure_claude.cache_clear()`
    forgets it.
    """
    key = f"{os.environ.get('MEMD_CLAUDE_BIN', '')}|{cache_dir()}"
    if key not in _OUTCOME:
        try:
            _OUTCOME[key] = _ensure_claude()
        except ClaudeUnavailable as exc:
            _OUTCOME[key] = exc
    found = _OUTCOME[key]
    if isinstance(found, ClaudeUnavailable):
        raise found
    return found


ensure_claude.cache_clear = _OUTCOME.clear  # type: ignore[attr-defined]


def _ensure_claude() -> ClaudeInstall:
    given = os.environ.get("MEMD_CLAUDE_BIN", "").strip()
    if given:
        path = Path(given).expanduser()
        resolved = path if path.is_file() else (Path(w) if (w := shutil.which(given)) else path)
        if not resolved.is_file():
            raise ClaudeUnavailable(f"MEMD_CLAUDE_BIN={given} is not a file")
        return ClaudeInstall(resolved, _version_of(resolved))

    prefix = cache_dir()
    if (prefix / _STAMP).is_file() and (found := _working_binary(prefix)) is not None:
        return found  # the common case: no lock, no network

    npm = shutil.which("npm")
    if npm is None:
        raise ClaudeUnavailable("npm is not on PATH; install Node.js/npm or set MEMD_CLAUDE_BIN")
    try:
        from filelock import FileLock, Timeout  # noqa: PLC0415 - start-up: filelock only when a lock is taken
    except ImportError as exc:  # pragma: no cover - filelock is a memd dependency
        raise ClaudeUnavailable(f"filelock is missing: {exc}") from exc
    prefix.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(prefix.parent / f".{prefix.name}.lock"))
    try:
        with lock.acquire(timeout=LOCK_TIMEOUT):
            # Another process may have finished the install while we waited.
            if (prefix / _STAMP).is_file() and (found := _working_binary(prefix)) is not None:
                return found
            _npm_install(prefix, npm)
            found = _working_binary(prefix)
            if found is None:
                tried = ", ".join(str(p) for p in _candidates(prefix))
                raise ClaudeUnavailable(f"npm installed {PACKAGE} but no runnable claude among: {tried}")
            (prefix / _STAMP).write_text(f"{found.version}\n{found.bin}\n", encoding="utf-8")
            return found
    except Timeout as exc:
        raise ClaudeUnavailable(f"waited {LOCK_TIMEOUT:.0f}s for another process installing into {prefix}") from exc


def claude_or_skip() -> ClaudeInstall:
    """`ensure_claude()`, or skip the calling test with the reason."""

    try:
        return ensure_claude()
    except ClaudeUnavailable as exc:
        pytest.skip(f"Claude Code unavailable: {exc}")


# --- running ------------------------------------------------------------------------

# What keeps Claude Code quiet and local (2.1.x): without
# CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC it fetches bootstrap data, the MCP
# registry, metrics opt-out and event logging from api.anthropic.com even when
# ANTHROPIC_BASE_URL points elsewhere.
QUIET_ENV: dict[str, str] = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
    "CI": "1",
    "TERM": "dumb",
    "NO_COLOR": "1",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
    "LANG": "C.UTF-8",
}

# From the caller's environment only what finding programs (git) needs.
_PASSED = ("PATH", "SYSTEMROOT", "TMPDIR")


def claude_env(config_dir: Path, base_url: str, home: Path, extra_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a run: nothing of the caller's but PATH."""
    env = {k: os.environ[k] for k in _PASSED if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(QUIET_ENV)
    env.update(
        HOME=str(home),
        USERPROFILE=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        XDG_STATE_HOME=str(home / ".local" / "state"),
        CLAUDE_CONFIG_DIR=str(config_dir),
        ANTHROPIC_BASE_URL=base_url,
        ANTHROPIC_API_KEY="test-key",
        # git (used by Claude Code for the branch/root) must not read the caller's config
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=str(home / ".gitconfig"),
    )
    env.update(extra_env or {})
    return {k: v for k, v in env.items() if v is not None}


class ClaudeRun(subprocess.CompletedProcess):  # type: ignore[type-arg]
    """A finished `claude -p`: CompletedProcess plus what the run was given."""

    elapsed: float
    session_id: str | None
    config_dir: Path
    cwd: Path

    def transcripts(self) -> list[Path]:
        """The session transcripts under `<config>/projects/*/`, sub-agents left out."""
        projects = self.config_dir / "projects"
        return sorted(p for p in projects.glob("*/*.jsonl")) if projects.is_dir() else []

    def transcript(self) -> Path | None:
        """This run's transcript (by session id, when one was given)."""
        if self.session_id:
            hits = sorted((self.config_dir / "projects").glob(f"*/{self.session_id}.jsonl"))
            return hits[0] if hits else None
        found = self.transcripts()
        return max(found, key=lambda p: p.stat().st_mtime) if found else None


def run_claude(
    prompt: str,
    cwd: str | os.PathLike[str],
    config_dir: str | os.PathLike[str],
    base_url: str,
    extra_env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
    timeout: float = 120,
    *,
    session_id: str | None = None,
    resume: str | None = None,
    home: str | os.PathLike[str] | None = None,
    claude: ClaudeInstall | None = None,
    check: bool = False,
) -> ClaudeRun:
    """Run `claude -p PROMPT` in `cwd` against the API at `base_url`.

    `config_dir` becomes CLAUDE_CONFIG_DIR. HOME is `home`, by default the
    parent of `config_dir` (so `<tmp>/home/.claude` gives `HOME=<tmp>/home`);
    nothing of the real home is read or written. A fresh session gets
    `--session-id` (given, or a new UUID, recorded on the result); `resume`
    continues that session instead (`--resume ID`). `args` are appended
    (e.g. `--mcp-config`, `--output-format json`). Skips the test when Claude
    Code is unavailable and no `claude` is given.
    """
    claude = claude or claude_or_skip()
    config = Path(config_dir)
    config.mkdir(parents=True, exist_ok=True)
    home_dir = Path(home) if home is not None else config.parent
    home_dir.mkdir(parents=True, exist_ok=True)
    cmd = [str(claude.bin), "-p", prompt]
    if resume:
        cmd += ["--resume", resume]
        session = resume
    else:
        session = session_id or str(uuid.uuid4())
        cmd += ["--session-id", session]
    cmd += list(args)
    env = claude_env(config, base_url, home_dir, extra_env)
    t0 = time.monotonic()
    try:
        done = subprocess.run(cmd, check=False, cwd=os.fspath(cwd), env=env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
        rc, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        rc = -9
        out = exc.stdout.decode("utf-8", "replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = (exc.stderr.decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else (exc.stderr or ""))
        err += f"\n[realclaude] timed out after {timeout}s"
    run = ClaudeRun(cmd, rc, out, err)
    run.elapsed = time.monotonic() - t0
    run.session_id = session
    run.config_dir = config
    run.cwd = Path(cwd)
    if check and rc != 0:
        raise AssertionError(f"claude exited {rc} after {run.elapsed:.1f}s\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}")
    return run


# --- project keys: memd's own implementation, checked here against the binary ----------

from memd.keys import canonical_root as claude_memory_root  # noqa: E402
from memd.keys import key_for_root as claude_key  # noqa: E402


def git_root(path: str | os.PathLike[str]) -> Path | None:
    """The nearest directory at or above `path` holding a `.git` (directory or file)."""
    p = Path(os.path.abspath(path))
    for d in (p, *p.parents):
        if (d / ".git").is_dir() or (d / ".git").is_file():
            return d
    return None


def claude_memory_key(cwd: str | os.PathLike[str]) -> str:
    """The key of `claude_memory_root(cwd)`: where `memory/MEMORY.md` is read from."""
    return claude_key(str(claude_memory_root(cwd)))
