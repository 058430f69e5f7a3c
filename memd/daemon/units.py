"""The unit files themselves: the systemd user unit and the launchd agent plist (SPEC §10.4).

Pure text: nothing here touches the filesystem except reading the templates in
`systemd/` and `launchd/` at the top of the repository. A wheel does not ship
those directories, so the same text is kept here as a fallback (the end of this
file); a test keeps the two identical. Where the unit goes and how it is
installed, started and removed is memd/daemon/service.py.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal
from xml.sax.saxutils import escape as xml_escape

from memd.errors import MemdError
from memd.tree import Home

UNIT_NAME = "memd.service"
LAUNCHD_LABEL = "com.memd.agent"
_REPO = Path(__file__).resolve().parents[2]
_TEMPLATE_FILES = {
    "systemd": _REPO / "systemd" / "memd.service",
    "launchd": _REPO / "launchd" / "com.memd.agent.plist",
}
# Characters systemd takes literally in an unquoted ExecStart word.
_SYSTEMD_PLAIN = re.compile(r"[A-Za-z0-9_@+=:,./-]+")
_PLACEHOLDER = re.compile(r"\{\{[A-Z_]+\}\}")

Manager = Literal["systemd", "launchd"]
MemdCommand = str | os.PathLike[str] | Sequence[str]


class ServiceError(MemdError):
    """The service cannot be rendered or installed as asked; the message says why."""


# --- filling a template ----------------------------------------------------------------


def home_root(home: Home | str | os.PathLike[str]) -> Path:
    root = home.root if isinstance(home, Home) else Path(home)
    return root.expanduser().absolute()


def _argv(memd: MemdCommand) -> list[str]:
    if isinstance(memd, (str, os.PathLike)):
        return [os.fspath(memd)]
    argv = [os.fspath(a) for a in memd]
    if not argv:
        raise ServiceError("no memd command to put in the unit")
    return argv


def _reject_control(text: str) -> str:
    # A newline in a path would start a new directive in the unit; refuse rather than escape.
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise ServiceError(f"{text!r}: control characters cannot go into a service unit")
    return text


def _template(manager: Manager) -> str:
    path = _TEMPLATE_FILES[manager]
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return SYSTEMD_TEMPLATE if manager == "systemd" else LAUNCHD_TEMPLATE


def _fill(template: str, values: dict[str, str]) -> str:
    out = template
    for name, value in values.items():
        out = out.replace("{{" + name + "}}", value)
    if left := _PLACEHOLDER.search(out):
        raise ServiceError(f"unit template has an unknown placeholder {left.group(0)}")
    return out


# --- rendering (pure) ------------------------------------------------------------------


def systemd_quote(word: str) -> str:
    """One ExecStart word: `%` and `$` doubled (specifiers, variables), quoted if not plain."""
    _reject_control(word)
    escaped = word.replace("%", "%%").replace("$", "$$")
    if _SYSTEMD_PLAIN.fullmatch(word):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_systemd(memd_path: MemdCommand, home: Home | str | os.PathLike[str]) -> str:
    """The systemd user unit that runs `memd --home HOME run`."""
    argv = _argv(memd_path)
    if not os.path.isabs(argv[0]):
        raise ServiceError(f"{argv[0]}: the unit needs an absolute path to memd")
    return _fill(_template("systemd"), {
        "MEMD": " ".join(systemd_quote(a) for a in argv),
        "HOME_DIR": systemd_quote(str(home_root(home))),
    })


def render_launchd(memd_path: MemdCommand, home: Home | str | os.PathLike[str]) -> str:
    """The launchd agent plist that runs `memd --home HOME run`."""
    argv = _argv(memd_path)
    if not os.path.isabs(argv[0]):
        raise ServiceError(f"{argv[0]}: the agent needs an absolute path to memd")
    strings = [xml_escape(_reject_control(a)) for a in argv]
    # {{MEMD}} sits inside one <string>; extra words become their own elements.
    return _fill(_template("launchd"), {
        "MEMD": "</string>\n    <string>".join(strings),
        "HOME_DIR": xml_escape(_reject_control(str(home_root(home)))),
    })


# --- fallback templates (identical to systemd/ and launchd/; tests check) ---------------

SYSTEMD_TEMPLATE = """\
# memd — keeps a coding agent's long-term memory in shape (systemd user unit).
# A template: `memd install` fills in the memd executable and the home, writes
# it to ~/.config/systemd/user/memd.service and enables it.
# Logs: `journalctl --user -u memd`, and memd/logs/memd.jsonl under the home.

[Unit]
Description=memd: long-term memory daemon for coding agents
StartLimitIntervalSec=600
StartLimitBurst=5

[Service]
Type=exec
ExecStart={{MEMD}} --home {{HOME_DIR}} run
Environment=PYTHONUNBUFFERED=1
# Restart after a crash, but not after an exit that a restart cannot fix:
# 2 usage error, 3 another daemon already runs on this home, 5 configuration error.
Restart=on-failure
RestartSec=10
RestartPreventExitStatus=2 3 5
# SIGTERM lets the running job finish and record its outcome; allow longer
# than the longest job before systemd escalates to SIGKILL.
KillSignal=SIGTERM
TimeoutStopSec=300
# Background work: never compete with the user's interactive processes.
Nice=10
CPUSchedulingPolicy=batch
IOSchedulingClass=idle

[Install]
WantedBy=default.target
"""

LAUNCHD_TEMPLATE = """\
<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<!--
  memd: keeps a coding agent's long-term memory in shape (launchd user agent).
  A template: `memd install` fills in the memd executable and the home, writes
  it to ~/Library/LaunchAgents/com.memd.agent.plist and bootstraps it.
  KeepAlive/SuccessfulExit=false restarts memd only after a failed exit.
  launchd has no equivalent of systemd's RestartPreventExitStatus, so a
  configuration error (exit 5) is retried every ThrottleInterval seconds.
  stderr is a copy of the warnings only (MEMD_STDERR_LEVEL): this file is not
  rotated, every event is in the rotated memd/logs/memd.jsonl.
-->
<plist version="1.0">
<dict>
  <key>Label</key>
  <string>com.memd.agent</string>
  <key>ProgramArguments</key>
  <array>
    <string>{{MEMD}}</string>
    <string>--home</string>
    <string>{{HOME_DIR}}</string>
    <string>run</string>
  </array>
  <key>RunAtLoad</key>
  <true/>
  <key>KeepAlive</key>
  <dict>
    <key>SuccessfulExit</key>
    <false/>
  </dict>
  <key>ThrottleInterval</key>
  <integer>60</integer>
  <key>ProcessType</key>
  <string>Background</string>
  <key>LowPriorityIO</key>
  <true/>
  <key>Nice</key>
  <integer>10</integer>
  <key>ExitTimeOut</key>
  <integer>300</integer>
  <key>EnvironmentVariables</key>
  <dict>
    <key>PYTHONUNBUFFERED</key>
    <string>1</string>
    <key>MEMD_STDERR_LEVEL</key>
    <string>warning</string>
  </dict>
  <key>StandardOutPath</key>
  <string>{{HOME_DIR}}/memd/logs/launchd.out.log</string>
  <key>StandardErrorPath</key>
  <string>{{HOME_DIR}}/memd/logs/launchd.err.log</string>
</dict>
</plist>
"""


__all__ = [
    "LAUNCHD_LABEL",
    "LAUNCHD_TEMPLATE",
    "SYSTEMD_TEMPLATE",
    "UNIT_NAME",
    "Manager",
    "MemdCommand",
    "ServiceError",
    "home_root",
    "render_launchd",
    "render_systemd",
    "systemd_quote",
]
