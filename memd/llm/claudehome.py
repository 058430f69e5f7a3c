"""What memd knows about the user's Claude Code without running it: the binary, the login, the pause.

Read by `memd status` and `memd doctor` (start-up sensitive: standard library only, no process
started) and by the `claude-code` provider (`memd.llm.claudecode`).

- `find_claude(configured, path)`: the `claude` binary, `memd.claudePath` first, else on PATH.
- `login_marker(env)`: the file that says Claude Code is logged in: `<config>/.credentials.json`
  (Linux, Windows) or an `oauthAccount` in `.claude.json` (macOS keeps the token in the
  keychain, but the account is there too). `<config>` is `CLAUDE_CONFIG_DIR`, else `~/.claude`;
  `.claude.json` sits in the config directory when `CLAUDE_CONFIG_DIR` is set, else in `~`.
- The pause: a usage-limit or rate-limit answer names when the limit resets; memd keeps that time
  in `<memd dir>/claude-code-pause.json` ({"until": ISO, "reason": str}) so every model job of
  every memd process waits for it without starting Claude Code again, and `memd status` shows it.

Invariant: nothing here writes outside memd's own directory, and nothing raises for a missing or
damaged file (a pause file that does not parse is no pause).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["PAUSE_FILE", "find_claude", "login_marker", "read_pause", "write_pause"]

PAUSE_FILE = "claude-code-pause.json"


def find_claude(configured: str = "", path: str | None = None) -> str | None:
    """The `claude` executable: `configured` (memd.claudePath) if it is one, else `claude` on `path`."""
    if configured:
        p = Path(configured).expanduser()
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
        return _which(configured, path) if os.sep not in configured else None
    return _which("claude", path)


def _which(name: str, path: str | None) -> str | None:
    """`shutil.which` for a plain name on POSIX, without importing shutil (`memd status` asks)."""
    for d in (path if path is not None else os.environ.get("PATH", os.defpath)).split(os.pathsep):
        cand = os.path.join(d or ".", name)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def login_marker(env: Mapping[str, str]) -> str | None:
    """The file showing a Claude Code login in this environment's home, or None."""
    home = Path(env.get("HOME") or Path.home())
    conf = env.get("CLAUDE_CONFIG_DIR")
    config = Path(conf).expanduser() if conf else home / ".claude"
    creds = config / ".credentials.json"
    if creds.is_file() and creds.stat().st_size > 2:
        return str(creds)
    state = (config if conf else home) / ".claude.json"
    try:
        if state.is_file() and state.stat().st_size < 64 << 20:
            data = json.loads(state.read_text(encoding="utf-8"))
            if isinstance(data, dict) and isinstance(data.get("oauthAccount"), dict):
                return f"{state} (oauthAccount)"
    except (OSError, ValueError):
        pass
    return None


def read_pause(memd_dir: Path | None, now: datetime) -> dict[str, Any] | None:
    """The pause still in force at `now` ({"until": datetime, "reason": str}), or None."""
    if memd_dir is None:
        return None
    try:
        data = json.loads((memd_dir / PAUSE_FILE).read_text(encoding="utf-8"))
        until = datetime.fromisoformat(str(data["until"]).replace("Z", "+00:00"))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if until.tzinfo is None:
        until = until.replace(tzinfo=UTC)
    if until <= now:
        return None
    return {"until": until, "reason": str(data.get("reason") or "usage limit")}


def write_pause(memd_dir: Path, until: datetime, reason: str) -> None:
    """Record that model calls through Claude Code wait until `until` (atomic, private)."""
    from memd.fsutil import atomic_write  # noqa: PLC0415 - start-up: only when a limit was hit

    stamp = until.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    atomic_write(memd_dir / PAUSE_FILE, json.dumps({"until": stamp, "reason": reason}) + "\n")


RATE_DAYS = 7
# Model calls a successful run of each job makes: extraction asks the gate, then (on yes) extracts.
CALLS_PER_RUN = {"extract": 2, "summary": 1, "dream": 1}


def calls_per_day(conn: Any, now: datetime, days: int = RATE_DAYS) -> float:
    """The model calls a day memd's jobs would make at the last `days` days' rate (their runs that
    did work, whatever the provider: an offline run is what a model run would have been)."""
    since = (now - _days(days)).astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    rows = conn.execute("SELECT job, COUNT(*) FROM runs WHERE outcome='ok' AND started_at >= ? GROUP BY job",
                        (since,)).fetchall()  # fmt: skip
    return sum(CALLS_PER_RUN.get(job, 0) * int(n) for job, n in rows) / days


def _days(n: int) -> Any:
    from datetime import timedelta  # noqa: PLC0415 - start-up

    return timedelta(days=n)


def switch_hint(claude_path: str, env: Mapping[str, str], effective: str) -> dict[str, Any] | None:
    """When a logged-in Claude Code is here and memd does not use it: what `memd status` and
    `memd doctor` say (memd never switches by itself: the calls count against the user's plan)."""
    if effective == "claude-code":
        return None
    binary = find_claude(claude_path, env.get("PATH"))
    marker = login_marker(env) if binary else None
    if binary is None or marker is None:
        return None
    return {"binary": binary, "login": marker,
            "switch": "memd provider claude-code"}  # fmt: skip
