"""Install memd as a per-user service: a systemd user unit or a launchd agent (SPEC §10.4).

Which service manager (the platform choice), where its unit goes, and the
install / uninstall steps. The unit text itself — rendering and the fallback
templates — is memd/daemon/units.py.

`install` and `uninstall` are a pure plan (`plan_install`, `plan_uninstall`:
files to write or remove, commands to run) executed by one small loop that
echoes every step before doing it, so `--dry-run` shows exactly what a real
run would do and tests can run the real loop with a recording `run`.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from memd.daemon.units import (
    LAUNCHD_LABEL,
    UNIT_NAME,
    Manager,
    MemdCommand,
    ServiceError,
    home_root,
    render_launchd,
    render_systemd,
)
from memd.fsutil import atomic_write, ensure_private_dir
from memd.tree import Home

SYSTEMD_DIR_ENV = "MEMD_SYSTEMD_USER_DIR"
LAUNCHD_DIR_ENV = "MEMD_LAUNCHD_DIR"
UNIT_FILE_MODE = 0o644  # the service manager reads it; nothing secret in it


class UnsupportedPlatform(ServiceError):
    """memd installs a service on Linux (systemd) and macOS (launchd) only."""


# --- where and what ------------------------------------------------------------------


def manager_for(platform: str = sys.platform) -> Manager:
    if platform.startswith("linux"):
        return "systemd"
    if platform == "darwin":
        return "launchd"
    raise UnsupportedPlatform(f"memd can install a service on Linux (systemd) or macOS (launchd), not {platform}")


def unit_path(platform: str = sys.platform) -> Path:
    """Where the unit goes; `$MEMD_SYSTEMD_USER_DIR` / `$MEMD_LAUNCHD_DIR` override it (tests, odd setups)."""
    if manager_for(platform) == "systemd":
        override = os.environ.get(SYSTEMD_DIR_ENV)
        if override:
            return Path(override).expanduser() / UNIT_NAME
        config = os.environ.get("XDG_CONFIG_HOME") or "~/.config"
        return Path(config).expanduser() / "systemd" / "user" / UNIT_NAME
    override = os.environ.get(LAUNCHD_DIR_ENV)
    base = Path(override).expanduser() if override else Path("~/Library/LaunchAgents").expanduser()
    return base / f"{LAUNCHD_LABEL}.plist"


def memd_executable() -> list[str]:
    """The command that starts this memd, as an absolute argv prefix for the unit.

    Prefers the script that is running (the memd the user just invoked), then
    the one beside this interpreter (same virtualenv), then `memd` on PATH, and
    last `python -m memd` with this interpreter. Paths are made absolute but not
    resolved: resolving a virtualenv's python symlink would leave the venv.
    """
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 is not None and argv0.name == "memd" and _is_executable(argv0):
        return [str(argv0.absolute())]
    beside = Path(sys.executable).parent / "memd"
    if _is_executable(beside):
        return [str(beside.absolute())]
    found = shutil.which("memd")
    if found:
        return [str(Path(found).absolute())]
    return [str(Path(sys.executable).absolute()), "-m", "memd"]


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def render(platform: str, memd_path: MemdCommand, home: Home | str | os.PathLike[str]) -> str:
    if manager_for(platform) == "systemd":
        return render_systemd(memd_path, home)
    return render_launchd(memd_path, home)


# --- plans (pure) -----------------------------------------------------------------------


@dataclass(frozen=True)
class Write:
    """A step of an install plan: write `text` to `path`."""

    path: Path
    text: str


@dataclass(frozen=True)
class Remove:
    """A step of an uninstall plan: remove `path`."""

    path: Path


@dataclass(frozen=True)
class Run:
    """A step of a plan: run `argv` (the service manager's command)."""

    argv: tuple[str, ...]
    must_succeed: bool = True  # False: a failure is expected and harmless (e.g. unloading what is not loaded)


@dataclass(frozen=True)
class Note:
    """A step of a plan that only says something to the user."""

    text: str


Step = Write | Remove | Run | Note


def _systemctl(*args: str, must_succeed: bool = True) -> Run:
    return Run(("systemctl", "--user", *args), must_succeed)


def _launchctl(*args: str, must_succeed: bool = True) -> Run:
    return Run(("launchctl", *args), must_succeed)


def plan_install(home: Home | str | os.PathLike[str], *, platform: str, memd_path: MemdCommand,
                 uid: int) -> list[Step]:
    """What `memd install` does, in order.

    systemd: `try-restart` before `enable --now` makes a reinstall take effect
    (a running daemon restarts on the new unit) while a first install just starts.
    launchd: `bootout` first (harmless if not loaded) because `bootstrap`
    refuses a label that is already loaded; `enable` because a disabled label
    cannot be bootstrapped.
    """
    target = unit_path(platform)
    text = render(platform, memd_path, home)
    if manager_for(platform) == "systemd":
        return [
            Write(target, text),
            _systemctl("daemon-reload"),
            _systemctl("try-restart", UNIT_NAME),
            _systemctl("enable", "--now", UNIT_NAME),
            Note("memd runs while you are logged in; to keep it running after logout: "
                 "loginctl enable-linger \"$USER\""),
        ]
    domain = f"gui/{uid}"
    return [
        Write(target, text),
        _launchctl("bootout", f"{domain}/{LAUNCHD_LABEL}", must_succeed=False),
        _launchctl("enable", f"{domain}/{LAUNCHD_LABEL}"),
        _launchctl("bootstrap", domain, str(target)),
    ]


def plan_uninstall(*, platform: str, uid: int) -> list[Step]:
    """What `memd uninstall` does, in order: stop and disable, then remove the unit."""
    target = unit_path(platform)
    if manager_for(platform) == "systemd":
        # The unit file goes even when systemctl cannot be reached (no user bus, a broken manager):
        # a leftover unit would start memd again at the next login.
        return [
            _systemctl("disable", "--now", UNIT_NAME, must_succeed=False),
            Remove(target),
            _systemctl("daemon-reload", must_succeed=False),
        ]
    return [
        _launchctl("bootout", f"gui/{uid}/{LAUNCHD_LABEL}", must_succeed=False),
        Remove(target),
    ]


# --- execution -----------------------------------------------------------------------


def run_command(argv: list[str]) -> int:
    """Run a service-manager command, its output going to the user's terminal."""
    try:
        return subprocess.run(argv, check=False).returncode
    except FileNotFoundError:
        print(f"{argv[0]}: command not found", file=sys.stderr)
        return 127


def execute(steps: Sequence[Step], *, dry_run: bool, echo: Callable[[str], None],
            run: Callable[[list[str]], int]) -> int:
    """Echo each step, then do it unless `dry_run`; stop at the first required step that fails.

    Returns 0, or the failing command's exit status (1 for a file that could not be written).
    """
    for step in steps:
        if isinstance(step, Note):
            echo(step.text)
        elif isinstance(step, Write):
            echo(f"{'would write' if dry_run else 'writing'} {step.path}")
            if dry_run:
                echo(step.text.rstrip("\n"))
            else:
                step.path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write(step.path, step.text, mode=UNIT_FILE_MODE)
        elif isinstance(step, Remove):
            echo(f"{'would remove' if dry_run else 'removing'} {step.path}")
            if not dry_run:
                step.path.unlink(missing_ok=True)
        else:
            echo(f"{'would run: ' if dry_run else ''}$ {shlex.join(step.argv)}")
            if dry_run:
                continue
            rc = run(list(step.argv))
            if rc != 0 and step.must_succeed:
                echo(f"failed (exit {rc}): {shlex.join(step.argv)}")
                return rc
    return 0


def user_bus_problem(env: dict[str, str]) -> str | None:
    """Why `systemctl --user` cannot work here, with what to do; None when a user bus is there (pure)."""
    if env.get("DBUS_SESSION_BUS_ADDRESS"):
        return None
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime and os.path.exists(os.path.join(runtime, "bus")):
        return None
    return ("no systemd user session here (no $DBUS_SESSION_BUS_ADDRESS, no $XDG_RUNTIME_DIR/bus), so "
            "`systemctl --user` cannot install memd. Log in through a normal session (ssh or console), or run "
            "`sudo loginctl enable-linger $USER` and log in again; or run `memd run` under another supervisor "
            "(tmux, a container's init, cron @reboot)")  # fmt: skip


def install(
    home: Home | str | os.PathLike[str],
    *,
    dry_run: bool,
    echo: Callable[[str], None],
    run: Callable[[list[str]], int] = run_command,
    platform: str = sys.platform,
    memd_path: MemdCommand | None = None,
) -> int:
    """Write the unit for this user (atomically) and start it; `dry_run` changes nothing."""
    steps = plan_install(home, platform=platform, memd_path=memd_path or memd_executable(), uid=os.getuid())
    problem = user_bus_problem(dict(os.environ)) if manager_for(platform) == "systemd" else None
    if problem and not dry_run:
        raise ServiceError(problem)
    if not dry_run:
        # launchd opens StandardErrorPath before memd runs: the directory must exist.
        root = home_root(home)
        ensure_private_dir(Home(root).logs_dir)
    return execute(steps, dry_run=dry_run, echo=echo, run=run)


def uninstall(
    home: Home | str | os.PathLike[str] | None = None,
    *,
    dry_run: bool,
    echo: Callable[[str], None],
    run: Callable[[list[str]], int] = run_command,
    platform: str = sys.platform,
) -> int:
    """Stop and disable the service and remove its unit; memd's data (and `home`) is left alone."""
    target = unit_path(platform)
    if not target.exists() and not target.is_symlink():
        echo(f"not installed: {target} does not exist")
        return 0
    rc = execute(plan_uninstall(platform=platform, uid=os.getuid()), dry_run=dry_run, echo=echo, run=run)
    if rc == 0 and home is not None:
        echo(f"memd's memories, state and logs under {home_root(home)} are kept")
    return rc


__all__ = [
    "LAUNCHD_DIR_ENV",
    "SYSTEMD_DIR_ENV",
    "UnsupportedPlatform",
    "execute",
    "install",
    "manager_for",
    "memd_executable",
    "plan_install",
    "plan_uninstall",
    "render",
    "run_command",
    "uninstall",
    "unit_path",
    "user_bus_problem",
]
