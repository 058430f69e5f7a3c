"""`memd connect` / `disconnect`: memd's hooks and MCP server in an agent's own configuration.

Claude Code (SPEC §11.1) reads hooks from `<home>/settings.json` under
`hooks.<Event>[].hooks[]` and user-scope MCP servers from `.claude.json`
(`mcpServers`): `$CLAUDE_CONFIG_DIR/.claude.json` when the home is a config
directory of its own, `~/.claude.json` beside the default `~/.claude`.

What `connect claude` adds, and `disconnect claude` removes again:

* one matcher group per event, holding one command hook that runs this memd:
  `SessionStart` → `memd context --hook`, `UserPromptSubmit` → `memd recall --hook`,
  `PreCompact` → `memd precompact --hook` (each followed by `|| true`: a hook never blocks);
* `mcpServers.memd` → `memd mcp` (stdio).

Rules, since these files belong to Claude Code and the user:

* **Strict JSON only.** Claude Code ignores a settings file holding a comment or
  a trailing comma *entirely*; memd never writes either, and a file that is not
  strict JSON is refused with where it breaks: nothing is changed.
* **Everything else stays**: other keys, other tools' hooks, the order of what
  was there. memd recognises its own hooks by their command (this memd's program
  with `context|recall|precompact --hook`), never by position.
* **Idempotent**: connecting twice is connecting once; a memd that moved (another
  venv, another `--home`) replaces its old entries in place.
* **Atomic, with a backup**: each changed file is replaced atomically
  (`memd.fsutil.atomic_write`, 0600) after its old bytes are copied to
  `<home>/memd/backups/<name>.<UTC time>`. A settings file that is a symlink
  (a dotfiles repository) is written where it points.
* `--dry-run` prints the exact change as a unified diff and writes nothing.
"""

from __future__ import annotations

import copy
import difflib
import itertools
import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from memd.errors import ConfigError, UsageError
from memd.fsutil import atomic_write, ensure_private_dir
from memd.settings import looks_like_claude_home
from memd.tree import DEFAULT_HOME, Home

SERVER = "memd"
# event → (memd sub-command, timeout in seconds). Recall may wait 8 s on a model (§7b.1).
HOOKS: dict[str, tuple[str, int]] = {
    "SessionStart": ("context", 10),
    "UserPromptSubmit": ("recall", 15),
    "PreCompact": ("precompact", 10),
}
SUBCOMMANDS = frozenset(sub for sub, _t in HOOKS.values())


class RefusedFile(ConfigError):
    """A configuration file memd will not change (not strict JSON, or an unexpected shape)."""


# --------------------------------------------------------------------------- commands


def memd_argv(home: Home) -> list[str]:
    """How a hook or an MCP client runs this memd: its console script beside the running
    Python, else `python -P -m memd` (-P: never import a `memd/` of the agent's working
    directory); `--home` unless the home is the default one."""
    script = Path(sys.executable).with_name("memd")
    argv = [str(script)] if script.is_file() and os.access(script, os.X_OK) else [sys.executable, "-P", "-m", "memd"]
    if Path(home.root) != Path(DEFAULT_HOME).expanduser().absolute():
        argv += ["--home", str(home.root)]
    return argv


# Claude Code runs a hook through the shell and treats exit code 2 as "block" (a
# UserPromptSubmit hook that exits 2 erases the prompt). memd's hooks exit 0 on any error
# of their own; `|| true` covers what happens before memd runs (a usage error, exit 2).
NEVER_BLOCK = "|| true"


def hook_command(home: Home, sub: str) -> str:
    return f"{shlex.join([*memd_argv(home), sub, '--hook'])} {NEVER_BLOCK}"


def mcp_server_entry(home: Home) -> dict[str, Any]:
    argv = memd_argv(home)
    return {"type": "stdio", "command": argv[0], "args": [*argv[1:], "mcp"], "env": {}}


def _runs_memd(argv: list[str]) -> bool:
    if not argv:
        return False
    if os.path.basename(argv[0]) == "memd":
        return True
    return any(a == "-m" and b == "memd" for a, b in itertools.pairwise(argv))


def is_memd_hook(entry: Any) -> bool:
    """A command hook of some memd: `<memd …> context|recall|precompact --hook`."""
    if not isinstance(entry, dict) or entry.get("type") != "command" or not isinstance(entry.get("command"), str):
        return False
    try:
        argv = shlex.split(entry["command"])
    except ValueError:
        return False
    if argv[-2:] == NEVER_BLOCK.split():
        argv = argv[:-2]
    return len(argv) >= 3 and argv[-1] == "--hook" and argv[-2] in SUBCOMMANDS and _runs_memd(argv[:-2])


def is_memd_server(entry: Any) -> bool:
    """An MCP server entry that runs `memd … mcp`."""
    if not isinstance(entry, dict) or not isinstance(entry.get("command"), str):
        return False
    args = entry.get("args") or []
    return isinstance(args, list) and args[-1:] == ["mcp"] and _runs_memd([entry["command"], *map(str, args[:-1])])


# --------------------------------------------------------------------------- files


@dataclass
class FileChange:
    """One configuration file: what it holds, what it will hold."""

    path: Path  # as named (settings.json, .claude.json)
    target: Path  # where the bytes go (a symlink's destination)
    old_text: str | None  # None: no file yet
    new_text: str

    @property
    def changed(self) -> bool:
        return self.old_text != self.new_text

    def diff(self) -> str:
        old = [] if self.old_text is None else self.old_text.splitlines(keepends=True)
        return "".join(difflib.unified_diff(old, self.new_text.splitlines(keepends=True),
                                            fromfile=f"{self.path} (now)" if self.old_text is not None else "/dev/null",
                                            tofile=f"{self.path} (after)"))  # fmt: skip


def _reject_constant(word: str) -> Any:
    raise ValueError(f"{word} is not JSON")


def read_strict(path: Path) -> tuple[Path, str | None, dict[str, Any]]:
    """(where to write, text, parsed object) of a JSON file Claude Code reads; a missing file is `{}`.

    Strict JSON as Claude Code parses it: a comment, a trailing comma, NaN, or a
    top level that is not an object is refused (RefusedFile) with the place.
    """
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        raw = target.read_bytes()
    except FileNotFoundError:
        return target, None, {}
    except OSError as exc:
        raise RefusedFile(f"{path}: cannot read ({exc.strerror or exc}); nothing changed") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RefusedFile(f"{path}: not UTF-8 at byte {exc.start}; nothing changed") from exc
    body = text.lstrip("\ufeff")
    if not body.strip():
        return target, text, {}
    try:
        data = json.loads(body, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise RefusedFile(
            f"{path}: not strict JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); Claude Code ignores such "
            "a file entirely, so memd changes nothing — fix it (no comments, no trailing commas) and run again"
        ) from exc
    except (ValueError, RecursionError) as exc:
        raise RefusedFile(f"{path}: not strict JSON ({exc}); nothing changed") from exc
    if not isinstance(data, dict):
        raise RefusedFile(f"{path}: the top level is a JSON {type(data).__name__}, not an object; nothing changed")
    return target, text, data


def _indent(text: str | None) -> int | str:
    """The indentation the file already uses (two spaces for a new file)."""
    for line in (text or "").splitlines()[1:]:
        stripped = line.lstrip(" \t")
        if stripped and len(stripped) < len(line):
            lead = line[: len(line) - len(stripped)]
            return "\t" if lead.startswith("\t") else len(lead)
    return 2


def dump(data: dict[str, Any], like: str | None) -> str:
    return json.dumps(data, indent=_indent(like), ensure_ascii=False) + "\n"


# --------------------------------------------------------------------------- settings.json


def with_hooks(data: dict[str, Any], commands: dict[str, tuple[str, int]], path: Path) -> dict[str, Any]:
    """`data` with memd's hook for each event: the first memd hook found is brought up to
    date in place (another venv, another home), any further one dropped; with none, a group
    of its own is appended."""
    new = copy.deepcopy(data)
    hooks = new.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise RefusedFile(f"{path}: \"hooks\" is a JSON {type(hooks).__name__}, not an object; nothing changed")
    for event, (command, timeout) in commands.items():
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise RefusedFile(f"{path}: \"hooks.{event}\" is not a list; nothing changed")
        want = {"type": "command", "command": command, "timeout": timeout}
        placed = False
        kept = []
        for group in groups:
            inner = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(inner, list) or not any(is_memd_hook(e) for e in inner):
                kept.append(group)
                continue
            entries = []
            for entry in inner:
                if not is_memd_hook(entry):
                    entries.append(entry)
                elif not placed:
                    entries.append({**entry, **want})
                    placed = True
            if entries:
                kept.append({**group, "hooks": entries})
        if not placed:
            kept.append({"hooks": [want]})
        hooks[event] = kept
    return new


def without_hooks(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """`data` without any memd hook; a group left empty goes, as does an event left empty."""
    new = copy.deepcopy(data)
    hooks = new.get("hooks")
    if not isinstance(hooks, dict):
        return new
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept = []
        for group in groups:
            inner = group.get("hooks") if isinstance(group, dict) else None
            if isinstance(inner, list) and any(is_memd_hook(e) for e in inner):
                rest = [e for e in inner if not is_memd_hook(e)]
                if not rest:
                    continue
                group = {**group, "hooks": rest}
            kept.append(group)
        if kept != groups:
            if kept:
                hooks[event] = kept
            else:
                del hooks[event]
    if not hooks and "hooks" in data and data["hooks"] != {}:
        del new["hooks"]
    return new


# --------------------------------------------------------------------------- .claude.json


def claude_json_path(home: Home) -> Path:
    """Where Claude Code keeps user-scope MCP servers for this home.

    With `CLAUDE_CONFIG_DIR` set, Claude Code keeps `.claude.json` inside that
    directory; for the default `~/.claude` it is `~/.claude.json`, beside it.
    """
    inside = home.root / ".claude.json"
    if inside.exists():
        return inside
    default = Path.home() / ".claude"
    if os.path.realpath(home.root) == os.path.realpath(default) and not os.environ.get("CLAUDE_CONFIG_DIR"):
        return Path.home() / ".claude.json"
    return inside


def with_server(data: dict[str, Any], entry: dict[str, Any], path: Path) -> dict[str, Any]:
    new = copy.deepcopy(data)
    servers = new.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise RefusedFile(f"{path}: \"mcpServers\" is not an object; nothing changed")
    old = servers.get(SERVER)
    if old is not None and not is_memd_server(old):
        raise RefusedFile(f"{path}: an MCP server named {SERVER!r} that is not memd is already there; nothing changed")
    if old != entry:
        servers[SERVER] = {**(old or {}), **entry}
    return new


def without_server(data: dict[str, Any]) -> dict[str, Any]:
    new = copy.deepcopy(data)
    servers = new.get("mcpServers")
    if isinstance(servers, dict) and is_memd_server(servers.get(SERVER)):
        del servers[SERVER]
    return new


# --------------------------------------------------------------------------- the whole


@dataclass
class Plan:
    changes: list[FileChange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> list[FileChange]:
        return [c for c in self.changes if c.changed]


def _change(path: Path, edit: Any, backups: Path | None = None) -> FileChange:
    """The change `edit` makes to `path`. With `backups` (disconnect): when a backup holds exactly
    the result — the file as it was before connect — its bytes come back, formatting and all."""
    target, text, data = read_strict(path)
    new = edit(data)
    if text is not None and new == data:
        return FileChange(path, target, text, text)
    return FileChange(path, target, text, _backup_text(backups, path.name, new) or dump(new, text))


def _backup_text(backups: Path | None, name: str, data: dict[str, Any]) -> str | None:
    if backups is None:
        return None
    try:
        found = sorted(backups.glob(f"{name}.*"), reverse=True)
    except OSError:
        return None
    for path in found[:5]:
        try:
            text = path.read_text(encoding="utf-8")
            if json.loads(text.lstrip("\ufeff") or "{}") == data:
                return text
        except (OSError, ValueError):
            continue
    return None


def plan_claude(home: Home, *, connect: bool) -> Plan:
    """What `connect claude` (or `disconnect claude`) would change; nothing is written."""

    plan = Plan()
    settings = home.settings_file
    if connect:
        commands = {ev: (hook_command(home, sub), t) for ev, (sub, t) in HOOKS.items()}
        plan.changes.append(_change(settings, lambda d: with_hooks(d, commands, settings)))
    else:
        plan.changes.append(_change(settings, lambda d: without_hooks(d, settings), home.memd_dir / "backups"))
    cj = claude_json_path(home)
    try:
        if connect:
            plan.changes.append(_change(cj, lambda d: with_server(d, mcp_server_entry(home), cj)))
        else:
            plan.changes.append(_change(cj, without_server, home.memd_dir / "backups"))
    except RefusedFile as exc:
        if not connect:
            raise
        argv = memd_argv(home)
        plan.notes.append(f"{exc}. Register the MCP server yourself: "
                          f"claude mcp add --scope user {SERVER} -- {shlex.join([*argv, 'mcp'])}")  # fmt: skip
    if connect and not looks_like_claude_home(home.root):
        plan.notes.append(f"{home.root} does not look like a Claude Code home (~/.claude or $CLAUDE_CONFIG_DIR); "
                          "Claude Code reads hooks only from its own settings.json")  # fmt: skip
    return plan


def apply(plan: Plan, home: Home, now: datetime) -> list[tuple[FileChange, Path | None]]:
    """Write the changed files (backup first, then an atomic replace); (change, backup) each."""

    done: list[tuple[FileChange, Path | None]] = []
    stamp = now.strftime("%Y%m%dT%H%M%S%fZ")
    for ch in plan.changed:
        backup = None
        if ch.old_text is not None:
            ensure_private_dir(home.memd_dir / "backups")
            backup = home.memd_dir / "backups" / f"{ch.path.name}.{stamp}"
            atomic_write(backup, ch.old_text)
        atomic_write(ch.target, ch.new_text)
        done.append((ch, backup))
    return done


def mcp_snippet(home: Home) -> str:
    """The `mcpServers` entry any MCP client takes (Claude Desktop, Cursor, …), as JSON."""
    entry = mcp_server_entry(home)
    entry.pop("type")
    return json.dumps({"mcpServers": {SERVER: entry}}, indent=2)


def refuse_agent(agent: str) -> UsageError:
    return UsageError(
        f"{agent} documents no hook or MCP configuration memd could write; have it load "
        f"`memd context --agent {agent} --cwd DIR` at session start and use `memd connect mcp --print` "
        "if it speaks MCP (README, \"Connect your agent\")"
    )
