"""`memd doctor`: one line per check, and what to do about each failure."""

from __future__ import annotations

import os
import sqlite3
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from memd.cli import command, get_home, json_out
from memd.settings import Settings


@dataclass
class Check:
    """One line of `memd doctor`: what was checked, whether it holds, and how to fix it."""

    name: str
    ok: bool
    detail: str
    fix: str = ""


def _mode(path: Any) -> int | None:
    try:
        return stat.S_IMODE(os.lstat(path).st_mode)
    except OSError:
        return None


def check_home(home: Any) -> Check:
    m = _mode(home.root)
    if m is None:
        return Check("home", False, f"{home.root} does not exist", "run `memd run` or `memd scan` once; memd creates it 0700")
    if os.path.islink(home.root):
        return Check("home", True, f"{home.root} (a symlink to {os.path.realpath(home.root)})")
    # The home and the memory directories may be the agent's (Claude Code makes them 0755):
    # doctor judges only what memd creates (`memd/`, see "permissions").
    return Check("home", True, f"{home.root} mode {m:04o}")


def check_private_files(home: Any) -> Check:
    bad = []
    for base in (home.memd_dir,):  # memory files may be the user's own, with their own modes
        if not base.is_dir():
            continue
        if (_mode(base) or 0) & 0o077:
            bad.append(str(base))
        for dirpath, dirnames, filenames in os.walk(base):
            for n in dirnames:
                if (_mode(os.path.join(dirpath, n)) or 0) & 0o077:
                    bad.append(os.path.join(dirpath, n))
            for n in filenames:
                if (_mode(os.path.join(dirpath, n)) or 0) & 0o077:
                    bad.append(os.path.join(dirpath, n))
    return Check("permissions", not bad, f"{len(bad)} files or directories readable by others" if bad else "memd's files are private",
                 f"chmod go-rwx {bad[0]} (and the others: `find {home.root} -perm /077`)" if bad else "")  # fmt: skip


def check_settings(home: Any) -> Check:
    from memd import settings as st

    s = st.load(home.settings_file)
    if s.broken:
        return Check("settings", False, s.warnings[0] if s.warnings else s.broken,
                     "fix the syntax error; meanwhile memd keeps the last settings that parsed")  # fmt: skip
    if s.warnings:
        return Check("settings", False, f"{len(s.warnings)} problems, first: {s.warnings[0]}",
                     "fix the fields `memd config --check` lists (each falls back to its default meanwhile)")  # fmt: skip
    if not s.strict_json and shared_with_claude(home):
        return Check("settings", False, f"{home.settings_file} has comments or trailing commas",
                     "Claude Code ignores such a file entirely: make it strict JSON")  # fmt: skip
    return Check("settings", True, f"{home.settings_file}" + ("" if home.settings_file.exists() else " (absent: defaults)"))


def shared_with_claude(home: Any) -> bool:
    """Whether this home is a Claude Code home (its settings.json is read by Claude Code too)."""
    from memd.settings import looks_like_claude_home

    return looks_like_claude_home(home.root)


def check_auto_memory(home: Any) -> Check:
    """Whether Claude Code's own auto-memory writes the memory folders memd maintains (SPEC §14).
    Both writing is supported (memd keeps every line and file of the other's), so this is said, not failed."""
    if not shared_with_claude(home):
        return Check("auto-memory", True, "not a Claude Code home: memd alone writes its memory folders")
    from memd.agent.connect import AUTO_MEMORY, auto_memory_on

    try:
        text = home.settings_file.read_text(encoding="utf-8") if home.settings_file.is_file() else None
    except (OSError, UnicodeDecodeError):
        text = None
    if os.environ.get("CLAUDE_CODE_DISABLE_AUTO_MEMORY", "").strip() not in ("", "0", "false"):
        return Check("auto-memory", True, "Claude Code's auto-memory is off here (CLAUDE_CODE_DISABLE_AUTO_MEMORY): "
                     "memd alone writes projects/*/memory/")  # fmt: skip
    if not auto_memory_on(text):
        return Check("auto-memory", True, f"Claude Code's auto-memory is off ({AUTO_MEMORY}: false): memd alone "
                     "writes projects/*/memory/")  # fmt: skip
    return Check("auto-memory", True, f"both write projects/*/memory/: Claude Code's auto-memory is on ({AUTO_MEMORY} "
                 "not false) and memd keeps every line and file of its own there (README, \"Beside Claude Code's own "
                 "memory\"); `memd connect claude --auto-memory off` leaves memory to memd")  # fmt: skip


def check_provider(home: Any, call: bool) -> Check:
    from memd import settings as st

    s = st.load(home.settings_file)
    provider, waiting = st.effective_provider(s, memd_dir=home.memd_dir)
    if provider == "claude-code" or waiting is None:
        found = _claude_code(home, s, provider, waiting, call)
        if found is not None:
            return found
    if waiting and "anthropic.key" in waiting:
        return Check("provider", False, f"{provider}: {waiting}", f"chmod 600 {home.memd_dir / 'anthropic.key'}")
    if waiting:
        return Check("provider", False, f"{provider}: {waiting}", "export ANTHROPIC_API_KEY=… (and for the service: see README, 'API key')")
    if provider == "offline":
        return Check("provider", True, "offline (deterministic, no model calls; set ANTHROPIC_API_KEY to use a model)")
    if not call:
        return Check("provider", True, f"anthropic, key set, models {s.memd.small_model} / {s.memd.strong_model} "
                     "(no call made; `memd doctor --call` makes one tiny one)")  # fmt: skip
    return _call_check(home, s)


def _claude_code(home: Any, s: Settings, provider: str, waiting: str | None, call: bool) -> Check | None:
    """claude-code's own lines (SPEC §15); for another provider, the offer of a logged-in Claude
    Code memd does not use (None when there is none: the usual lines follow)."""
    from memd.clock import system_clock
    from memd.llm.claudehome import find_claude, login_marker, read_pause, switch_hint

    if provider != "claude-code":
        hint = switch_hint(s.memd.claude_path, os.environ, provider)
        if hint is None or (call and provider != "offline"):
            return None
        base = _plain(provider)
        return Check("provider", True, f"{base}; Claude Code is logged in here ({hint['login']}): "
                     f"`{hint['switch']}` uses it — its calls count against your plan")  # fmt: skip
    if waiting:
        return Check("provider", False, f"claude-code: {waiting}", "install Claude Code or set memd.claudePath")
    pause = read_pause(home.memd_dir, system_clock())
    if pause is not None:
        return Check("provider", False, f"claude-code: {pause['reason']}; model calls wait until "
                     f"{pause['until'].isoformat(timespec='minutes')}", "wait for the limit to reset")  # fmt: skip
    login = login_marker(os.environ) or "no login found (run `claude` once and /login)"
    if not call:
        return Check("provider", True, f"claude-code at {find_claude(s.memd.claude_path)}, login: {login} "
                     "(no call made; `memd doctor --call` makes one tiny one)")  # fmt: skip
    return _call_check(home, s)


def _plain(provider: str) -> str:
    return "offline (deterministic, no model calls)" if provider == "offline" else f"{provider}, key set"


def _call_check(home: Any, s: Settings) -> Check:
    from memd.job.context import make_context
    from memd.logs.events import get_logger

    ctx = make_context(home, s, log=get_logger("memd.doctor"))
    try:
        reply = ctx.llm.complete(job="doctor", tier="small", system="Answer with one word.", user="Say ok.", max_tokens=5)
        return Check("provider", True, f"{ctx.llm.provider} answered ({reply.model}, {reply.input_tokens}+{reply.output_tokens} tokens)")
    except Exception as exc:
        return Check("provider", False, f"{s.memd.provider} call failed: {exc}", "check the key, `memd.baseUrl` and the network")
    finally:
        ctx.conn.close()


def check_service(home: Any) -> Check:
    from memd.daemon import service
    from memd.daemon.lock import daemon_alive

    try:
        alive = daemon_alive(home)
    except Exception as exc:
        return Check("daemon", False, f"cannot probe the daemon lock: {exc}", f"inspect {home.locks_dir}")
    unit = service.unit_path(sys.platform)
    installed = unit.exists()
    if alive:
        return Check("daemon", True, f"running (pid {alive.get('pid')}); service unit {'installed' if installed else 'not installed'}")
    if installed:
        return Check("daemon", False, f"service installed ({unit}) but no daemon runs for {home.root}",
                     "systemctl --user status memd (or `launchctl print gui/$UID/com.memd.agent`) and `memd logs --level error`")  # fmt: skip
    return Check("daemon", False, "not running, no service installed", "memd install (or run `memd run` in a terminal)")


def check_locks(home: Any) -> Check:
    d = home.locks_dir
    if not d.exists():
        return Check("locks", True, "no locks directory yet")
    if d.is_symlink():
        return Check("locks", False, f"{d} is a symlink", f"remove it: rm {d} (memd recreates it 0700)")
    odd = [e.name for e in os.scandir(d) if e.is_symlink() or not e.is_file(follow_symlinks=False)]
    if odd:
        return Check("locks", False, f"unexpected entries in {d}: {', '.join(odd[:3])}", f"remove them from {d} while memd is stopped")
    return Check("locks", True, f"{d} holds only lock files")


def check_ledger(home: Any) -> Check:
    """Health is progress: a session the ledger cannot advance is a failure, not a green row."""
    if not home.state_db.is_file():
        return Check("ledger", True, "no ledger yet")
    from memd import state
    from memd.ledger.query import stuck_sessions

    try:
        conn = state.connect(home.state_db, readonly=True)
        try:
            stuck = stuck_sessions(conn)
        finally:
            conn.close()
    except Exception as exc:  # the state check above says what is wrong with the database
        return Check("ledger", False, f"cannot read the ledger ({exc})", "see the state check")
    if not stuck:
        return Check("ledger", True, "every session advances")
    first = stuck[0]
    return Check("ledger", False, f"{len(stuck)} session(s) cannot advance; {first['key']}/{first['session_id']}: "
                 f"{first['reason']}", "see `memd logs --level warning`; `memd scan` retries them")  # fmt: skip


def check_db(path: Any, what: str) -> Check:
    if not os.path.lexists(path):
        return Check(what, True, f"{path} not created yet")
    mode = os.lstat(path).st_mode
    if not stat.S_ISREG(mode):  # SQLite would block on a FIFO forever
        from memd.fsutil import kind_of

        return Check(what, False, f"{path}: {kind_of(mode)}, not a regular file",
                     f"stop memd, move {path} aside; memd rebuilds it")  # fmt: skip
    try:
        conn = sqlite3.connect(f"{Path(path).absolute().as_uri()}?mode=ro", uri=True, timeout=5)  # ? # % escaped
        conn.text_factory = lambda b: b.decode("utf-8", "replace")  # a damaged page's garbage, shown, not raised
        try:
            res = " ".join(str(conn.execute("PRAGMA quick_check").fetchone()[0]).split())[:300]
        finally:
            conn.close()
    except sqlite3.Error as exc:
        res = str(exc)
    ok = res == "ok"
    fix = "" if ok else f"stop memd, move {path} aside; memd rebuilds it ({'re-reading transcripts' if what == 'state' else 'from the memory files'})"
    return Check(what, ok, f"{path}: {res}", fix)


def check_links(home: Any) -> Check:
    """The one rule for links (README, "Symlinks and special files"): memd never writes through a link,
    in its own directory (`memd/`) nor to memory (`memory/`, `projects/`, issue 23): either is a failure,
    and this check says where the link leads."""
    from memd.fsutil import own_links, shown

    inside = own_links(home.memd_dir)
    if inside:
        return Check("links", False, f"{inside[0]} is a symlink" + (f" (and {len(inside) - 1} more)" if len(inside) > 1 else "")
                     + "; memd refuses to follow links in its own directory",
                     f"replace it with a real directory: mv {inside[0]} {inside[0]}.link && mkdir -m 700 {inside[0]}")  # fmt: skip
    led = [f"{p.name}/ → {os.path.realpath(p)}" for p in (home.global_memory, home.projects) if os.path.islink(p)]
    if led:
        first = home.global_memory if os.path.islink(home.global_memory) else home.projects
        return Check("links", False, "; ".join(led) + ": memd never writes memory through a link (it would land "
                     "outside the home)", f"replace it with a real directory: mv {first} {first}.link && mkdir -m 700 "
                     f"{first} && cp -a {first}.link/. {first}/")  # fmt: skip
    try:
        skipped = [shown(f"projects/{e.name}/memory") for e in os.scandir(home.projects)
                   if e.is_dir() and os.path.islink(os.path.join(e.path, "memory"))]  # fmt: skip
    except OSError:
        skipped = []
    detail = "; ".join(led) if led else "no linked directories"
    if skipped:
        detail += f"; not followed (a project's memory directory is never a link): {', '.join(skipped[:3])}"
    return Check("links", True, detail)


def check_names(home: Any) -> Check:
    """Project directories and transcripts whose names are not valid UTF-8 (a tree copied or restored from
    another system): memd skips them, as no ledger row or answer can carry such a name, and says so here."""
    from memd.discovery import unreadable_names

    bad = unreadable_names(home)
    if not bad:
        return Check("names", True, "every project and transcript name under projects/ is valid UTF-8")
    more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
    return Check("names", False, f"{', '.join(bad[:3])}{more}: not valid UTF-8, so memd skips them (their sessions "
                 "are not read)", "rename them to UTF-8 names (e.g. `convmv -f latin1 -t utf8 --notest`)")  # fmt: skip


CHECKS: list[Callable[..., Check]] = [check_home, check_private_files, check_links, check_settings, check_service,
                                      check_locks, check_auto_memory, check_names]  # fmt: skip


@command("doctor")
@click.option("--call", is_flag=True, help="Also make one tiny model call to test the key (costs a few tokens).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def doctor_cmd(ctx: click.Context, call: bool, as_json: bool) -> None:
    """Check the home, settings, provider and key, the service, locks and databases."""
    home = get_home(ctx)
    checks = [f(home) for f in CHECKS]
    checks.insert(4, check_provider(home, call))
    checks += [check_db(home.state_db, "state"), check_db(home.search_db, "search"), check_ledger(home)]
    if as_json:
        json_out([c.__dict__ for c in checks])
    else:
        for c in checks:
            click.echo(f"{'ok  ' if c.ok else 'FAIL'} {c.name:<12} {c.detail}")
            if not c.ok and c.fix:
                click.echo(f"     {'':<12} → {c.fix}")
    sys.exit(0 if all(c.ok for c in checks) else 1)
