"""`memd connect` / `disconnect`: memd's hooks, MCP server and pause commands in Claude Code's own configuration.

Claude Code (SPEC §11.1) reads hooks from `<home>/settings.json` under
`hooks.<Event>[].hooks[]`, user-scope MCP servers from `.claude.json` (`mcpServers`):
`$CLAUDE_CONFIG_DIR/.claude.json` when the home is a config directory of its own,
`~/.claude.json` beside the default `~/.claude`), and custom commands from
`<home>/commands/<name>.md`.

What `connect claude` adds, and `disconnect claude` removes again:

* one matcher group per event, holding one command hook that runs this memd:
  `SessionStart` → `memd context --hook`, `UserPromptSubmit` → `memd recall --hook`,
  `PreCompact` → `memd precompact --hook` (each followed by `|| true`: a hook never blocks);
* `mcpServers.memd` → `memd mcp` (stdio);
* the custom commands `/pause-memory` (and its aliases `/memory-pause`, `/toggle-memory`) and
  `/resume-memory`, so that Claude Code acknowledges a pause instead of calling the command
  unknown; a file of the user's with one of those names is left alone;
* with `--auto-memory off`: `autoMemoryEnabled: false` (SPEC §14), and back to what was there.

Rules, since these files belong to Claude Code and the user:

* **Strict JSON only.** Claude Code ignores a settings file holding a comment, a trailing
  comma or a non-finite number *entirely*; memd never writes one, and a file that is not
  strict JSON is refused with where it breaks: nothing is changed. So is anything that is
  not a regular file (a FIFO, `/dev/zero` behind a link) or is over `MAX_CONFIG_BYTES`,
  checked before a byte is read.
* **Byte for byte.** memd never re-serialises these files: it splices in, and out, only the
  members it owns (`memd.agent.jsontext`), in the container's own style. Every other byte —
  indentation or compactness, CRLF, duplicate keys, number spellings, order — stays, and so
  does the file's mode. `disconnect` removes what connect created (an `mcpServers` or `hooks`
  it added, a file that did not exist) and, when the file still holds exactly what connect
  wrote, puts the original bytes back (`memd/connect-claude.json` records what connect did).
* **Idempotent**: connecting twice is connecting once; a memd that moved (another
  venv, another `--home`) replaces its old entries in place. memd recognises its own hooks
  by their command, never by position.
* **Atomic, with a backup**: each changed file is replaced atomically after its old bytes
  are copied to `<home>/memd/backups/<name>.<UTC time>`. A settings file that is a symlink
  (a dotfiles repository) is written where it points.
* `--dry-run` prints the exact change as a unified diff and writes nothing.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import itertools
import json
import os
import shlex
import stat
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from memd.agent import jsontext
from memd.errors import ConfigError, UsageError
from memd.fsutil import PRIVATE_FILE, atomic_write, ensure_private_dir, kind_of, read_regular
from memd.tree import DEFAULT_HOME, Home

SERVER = "memd"
# event → (memd sub-command, timeout in seconds). Recall answers within memd.recallBudgetMs (1.5 s) of its start (§17).
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


# A hook's program (`hook_argv`): the directory memd is imported from, put on the path by hand, then
# the entry `memd` runs. `{root!r}` is a Python literal of any path (quotes, spaces, non-UTF-8 bytes).
# When that directory holds no memd any more (memd reinstalled for the same interpreter path: a venv or
# `pipx reinstall` on a newer Python moves lib/python3.X), `site` runs first and finds the memd the
# interpreter has now, as `python -P -m memd` did; one stat on the path a hook pays anyway.
HOOK_CODE = ("import os, sys; d = {root!r}; os.path.isdir(d + '/memd') or __import__('site').main(); "
             "sys.path.append(d); from memd.__main__ import main; main()")
HOOK_CODE_MARK = "from memd.__main__ import main; main()"  # how `_runs_memd` knows a hook program


def hook_argv(home: Home) -> list[str]:
    """How a hook runs this memd: the running interpreter with `-S -P -c HOOK_CODE`, not the console script
    beside it nor `-m memd`. The script pip writes runs `import re` and a `re.sub` before memd's first line
    (6-8 ms a hook, half of a bare interpreter's start, paid on every prompt); `-S` leaves out `site` (the
    venv's configuration and its .pth files: ~3 ms of a 10-13 ms start), which a hook the daemon answers
    does not need: it loads four modules of memd's own, from the directory named in the program. A hook
    that answers itself, or any other command line, runs `site` first (`memd.__main__`), so it has every
    package it would have had (bench/RESULTS.md, "Hooks near the floor"). -P: never a `memd/` of the
    agent's working directory. `--home` as in `memd_argv`."""
    argv = [sys.executable, "-S", "-P", "-c", HOOK_CODE.format(root=_import_root())]
    if Path(home.root) != Path(DEFAULT_HOME).expanduser().absolute():
        argv += ["--home", str(home.root)]
    return argv


def _import_root() -> str:
    """The directory this memd's package is imported from (site-packages, or a checkout's root)."""
    import memd  # noqa: PLC0415 - loaded already

    return os.path.dirname(os.path.dirname(os.path.abspath(memd.__file__)))


def hook_command(home: Home, sub: str) -> str:
    return f"{shlex.join([*hook_argv(home), sub, '--hook'])} {NEVER_BLOCK}"


def mcp_server_entry(home: Home) -> dict[str, Any]:
    argv = memd_argv(home)
    return {"type": "stdio", "command": argv[0], "args": [*argv[1:], "mcp"], "env": {}}


def _runs_memd(argv: list[str]) -> bool:
    if not argv:
        return False
    if os.path.basename(argv[0]) == "memd":
        return True
    return any((a == "-m" and b == "memd") or (a == "-c" and HOOK_CODE_MARK in b) for a, b in itertools.pairwise(argv))


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

MAX_CONFIG_BYTES = 256 << 20  # a .claude.json of tens of MB is normal; /dev/zero is not
STATE_NAME = "connect-claude.json"
EMPTY = "{\n}\n"  # what a new file starts as: memd's members are added to it in the two-space style


@dataclass
class FileChange:
    """One configuration file: what it holds, what it will hold."""

    path: Path  # as named (settings.json, .claude.json)
    target: Path  # where the bytes go (a symlink's destination)
    old_text: str | None  # None: no file yet
    new_text: str | None  # None: the file goes (connect created it)
    mode: int | None = None  # the file's mode, kept
    record: dict[str, Any] = field(default_factory=dict)  # what connect did here, for disconnect

    @property
    def changed(self) -> bool:
        return self.old_text != self.new_text

    def diff(self) -> str:
        old = [] if self.old_text is None else self.old_text.splitlines(keepends=True)
        new = [] if self.new_text is None else self.new_text.splitlines(keepends=True)
        return "".join(difflib.unified_diff(old, new,
                                            fromfile=f"{self.path} (now)" if self.old_text is not None else "/dev/null",
                                            tofile=f"{self.path} (after)" if self.new_text is not None else "/dev/null"))  # fmt: skip


def read_config(path: Path) -> tuple[Path, str | None, int | None]:
    """(where to write, text, mode) of a JSON file Claude Code reads; (target, None, None) when absent.

    The file type and size are checked before anything is read: a FIFO would block for
    good and `/dev/zero` never ends. Strictness is checked by the edits (`jsontext.top`).
    """
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return target, None, None
    except OSError as exc:
        raise RefusedFile(f"{path}: cannot read ({exc.strerror or exc}); nothing changed") from exc
    if not stat.S_ISREG(st.st_mode):
        raise RefusedFile(f"{path}: {kind_of(st.st_mode)}, not a regular file; nothing changed")
    if st.st_size > MAX_CONFIG_BYTES:
        raise RefusedFile(f"{path}: {st.st_size:,} bytes, over memd's {MAX_CONFIG_BYTES >> 20} MiB limit for a "
                          "configuration file; nothing changed")  # fmt: skip
    try:
        raw = read_regular(target, MAX_CONFIG_BYTES)
    except OSError as exc:
        raise RefusedFile(f"{path}: cannot read ({exc.strerror or exc}); nothing changed") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RefusedFile(f"{path}: not UTF-8 at byte {exc.start}; nothing changed") from exc
    return target, text, stat.S_IMODE(st.st_mode)


def _root(text: str, path: Path) -> jsontext.Value:
    """The top-level object of a file's text; RefusedFile (nothing changed) for anything else."""
    try:
        root = jsontext.top(text)
    except jsontext.JSONTextError as exc:
        raise RefusedFile(
            f"{path}: not strict JSON ({exc}); Claude Code ignores such a file entirely, so memd changes nothing "
            "— fix it (no comments, no trailing commas, finite numbers) and run again"
        ) from None
    if not isinstance(root.value, dict):
        kind = "list" if isinstance(root.value, list) else type(root.value).__name__
        raise RefusedFile(f"{path}: the top level is a JSON {kind}, not an object; nothing changed")
    return root


def _base(text: str | None) -> str:
    return EMPTY if text is None or not text.strip() else text


def _own(text: str, path: Path, key: str, kind: type) -> jsontext.Member | None:
    """The top-level member `key` memd edits: of the right kind, and only once (Claude Code
    reads the last of duplicate keys; memd would edit the first)."""
    root = _root(text, path)
    if jsontext.duplicates(text, root, key):
        raise RefusedFile(f"{path}: {key!r} appears twice (Claude Code reads only the last); nothing changed")
    found = jsontext.member(text, root, key)
    if found is not None and not isinstance(found.value.value, kind):
        raise RefusedFile(f"{path}: \"{key}\" is a JSON {_kind(found.value.value)}, not an object; nothing changed")
    return found


def _kind(value: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean"}.get(type(value), type(value).__name__)


# --------------------------------------------------------------------------- settings.json: hooks


def _event(text: str, path: Path, event: str) -> jsontext.Member | None:
    hooks = _own(text, path, "hooks", dict)
    if hooks is None:
        return None
    found = jsontext.member(text, hooks.value, event)
    if found is not None and not isinstance(found.value.value, list):
        raise RefusedFile(f"{path}: \"hooks.{event}\" is not a list; nothing changed")
    return found


def _memd_hooks(groups: list[Any]) -> list[tuple[int, int]]:
    return [(gi, ei) for gi, group in enumerate(groups)
            if isinstance(group, dict) and isinstance(group.get("hooks"), list)
            for ei, entry in enumerate(group["hooks"]) if is_memd_hook(entry)]  # fmt: skip


def _entry_at(text: str, event: jsontext.Member, gi: int, ei: int) -> tuple[jsontext.Value, jsontext.Value]:
    """(the group's `hooks` array, the entry) at group `gi`, entry `ei` of an event's list."""
    group = jsontext.items(text, event.value.start)[gi]
    inner = jsontext.member(text, group, "hooks")
    assert inner is not None
    return inner.value, jsontext.items(text, inner.value.start)[ei]


def _drop_hook(text: str, path: Path, event_name: str, gi: int, ei: int) -> str:
    """One memd hook out of an event's list; its group goes too when nothing else is left in it."""
    event = _event(text, path, event_name)
    assert event is not None
    inner, _entry = _entry_at(text, event, gi, ei)
    if len(inner.value) == 1:
        return jsontext.remove_item(text, event.value, gi)
    return jsontext.remove_item(text, inner, ei)


def with_hooks(text: str, commands: dict[str, tuple[str, int]], path: Path) -> tuple[str, list[list[str]]]:
    """`text` with memd's hook for each event, and the containers that made (for disconnect).

    The first memd hook found is brought up to date in place (another venv, another home),
    any further one dropped; with none, a group of its own is appended to the event's list.
    """
    created: list[list[str]] = []
    if _own(text, path, "hooks", dict) is None:
        value = {ev: [{"hooks": [_want(cmd, t)]}] for ev, (cmd, t) in commands.items()}
        return jsontext.insert_member(text, _root(text, path), "hooks", value), [["hooks"]]
    for event_name, (command, timeout) in commands.items():
        want = _want(command, timeout)
        event = _event(text, path, event_name)
        if event is None:
            hooks = _own(text, path, "hooks", dict)
            assert hooks is not None
            text = jsontext.insert_member(text, hooks.value, event_name, [{"hooks": [want]}])
            created.append(["hooks", event_name])
            continue
        found = _memd_hooks(event.value.value)
        if not found:
            text = jsontext.append_item(text, event.value, {"hooks": [want]})
            continue
        for gi, ei in reversed(found[1:]):
            text = _drop_hook(text, path, event_name, gi, ei)
        event = _event(text, path, event_name)
        assert event is not None
        gi, ei = found[0]
        _inner, entry = _entry_at(text, event, gi, ei)
        if {**entry.value, **want} != entry.value:
            text = jsontext.replace_value(text, entry, {**entry.value, **want})
    return text, created


def _want(command: str, timeout: int) -> dict[str, Any]:
    return {"type": "command", "command": command, "timeout": timeout}


def without_hooks(text: str, path: Path, created: list[list[str]] | None) -> str:
    """`text` without any memd hook. A group left empty goes; an event list or `hooks` left
    empty goes when connect created it (`created`; None: not known, as from an older memd:
    an emptied event list goes, an emptied `hooks` goes)."""
    hooks = _own(text, path, "hooks", dict)
    if hooks is None:
        return text
    for name in [m.key for m in jsontext.members(text, hooks.value.start)]:
        event = _event(text, path, name)
        if event is None:
            continue
        emptied = False
        while event is not None and (found := _memd_hooks(event.value.value)):
            text = _drop_hook(text, path, name, *found[0])
            event = _event(text, path, name)
            emptied = True
        made = created is None or ["hooks"] in created or ["hooks", name] in created
        if emptied and event is not None and not event.value.value and made:
            hooks = _own(text, path, "hooks", dict)
            assert hooks is not None
            text = jsontext.remove_member(text, hooks.value, name)
    hooks = _own(text, path, "hooks", dict)
    if hooks is not None and not hooks.value.value and (["hooks"] in (created or []) or created is None):
        text = jsontext.remove_member(text, _root(text, path), "hooks")
    return text


# --------------------------------------------------------------------------- settings.json: auto-memory

AUTO_MEMORY = "autoMemoryEnabled"


def auto_memory_on(text: str | None) -> bool:
    """Whether Claude Code's auto-memory is on by this settings text (on unless `false`)."""
    if not text or not text.strip():
        return True
    try:
        data = jsontext.loads(text.lstrip("\ufeff"))
    except jsontext.JSONTextError:
        return True
    return not (isinstance(data, dict) and data.get(AUTO_MEMORY) is False)


def auto_memory_off(text: str, path: Path) -> tuple[str, dict[str, Any] | None]:
    """`text` with `autoMemoryEnabled: false`, and what was there before (None: it was false already)."""
    found = jsontext.member(text, _root(text, path), AUTO_MEMORY)
    if found is None:
        return jsontext.insert_member(text, _root(text, path), AUTO_MEMORY, False), {"absent": True}
    if found.value.value is False:
        return text, None
    return jsontext.replace_raw(text, found.value, "false"), {"raw": text[found.value.start : found.value.end]}


def auto_memory_back(text: str, path: Path, before: dict[str, Any] | None) -> str:
    """`text` with `autoMemoryEnabled` as it was before connect turned it off, if it is still memd's `false`."""
    if not before:
        return text
    found = jsontext.member(text, _root(text, path), AUTO_MEMORY)
    if found is None or found.value.value is not False:
        return text  # the user changed it since: theirs
    if before.get("absent"):
        return jsontext.remove_member(text, _root(text, path), AUTO_MEMORY)
    return jsontext.replace_raw(text, found.value, str(before.get("raw", "true")))


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


def with_server(text: str, entry: dict[str, Any], path: Path) -> tuple[str, list[list[str]]]:
    servers = _own(text, path, "mcpServers", dict)
    if servers is None:
        return jsontext.insert_member(text, _root(text, path), "mcpServers", {SERVER: entry}), [["mcpServers"]]
    old = jsontext.member(text, servers.value, SERVER)
    if old is None:
        return jsontext.insert_member(text, servers.value, SERVER, entry), []
    if not is_memd_server(old.value.value):
        raise RefusedFile(f"{path}: an MCP server named {SERVER!r} that is not memd is already there; nothing changed")
    if {**old.value.value, **entry} != old.value.value:
        text = jsontext.replace_value(text, old.value, {**old.value.value, **entry})
    return text, []


def without_server(text: str, path: Path, created: list[list[str]] | None) -> str:
    servers = _own(text, path, "mcpServers", dict)
    if servers is None:
        return text
    old = jsontext.member(text, servers.value, SERVER)
    if old is None or not is_memd_server(old.value.value):
        return text
    if len(jsontext.members(text, servers.value.start)) == 1 and ["mcpServers"] in (created or []):
        return jsontext.remove_member(text, _root(text, path), "mcpServers")  # one splice: no second pass
    return jsontext.remove_member(text, servers.value, SERVER)


# --------------------------------------------------------------------------- custom commands

PAUSE_BODY = ("memd: the user paused long-term memory for this session with /{name}. Nothing said from here on is "
              "remembered until /resume-memory. Acknowledge in one short sentence and carry on.")  # fmt: skip
COMMANDS: dict[str, tuple[str, str]] = {
    "pause-memory": ("Pause memd's memory for this session (nothing from here on is remembered)", PAUSE_BODY),
    "memory-pause": ("Pause memd's memory for this session (same as /pause-memory)", PAUSE_BODY),
    "toggle-memory": ("Pause memd's memory for this session, or resume it when paused",
                      "memd: the user toggled long-term memory for this session with /toggle-memory (paused when it "
                      "was on, resumed when it was paused). Acknowledge in one short sentence and carry on."),
    "resume-memory": ("Resume memd's memory for this session",
                      "memd: the user resumed long-term memory for this session with /resume-memory; what is said "
                      "from here on may be remembered again. Acknowledge in one short sentence and carry on."),
}  # fmt: skip


def command_text(name: str) -> str:
    """A Claude Code custom command (`<home>/commands/<name>.md`): a description, and what the model is told."""
    description, body = COMMANDS[name]
    return f"---\ndescription: {description}\n---\n\n{body.format(name=name)}\n"


def _sha(data: str | bytes) -> str:
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


# --------------------------------------------------------------------------- the whole


@dataclass
class Plan:
    """What `memd connect` (or `disconnect`) would change: the files, the commands, and what it says."""

    changes: list[FileChange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    commands_add: dict[Path, str] = field(default_factory=dict)  # file → text, created only if still absent
    commands_remove: list[Path] = field(default_factory=list)
    kept_commands: list[str] = field(default_factory=list)  # the user's own file of one of memd's names

    @property
    def changed(self) -> list[FileChange]:
        return [c for c in self.changes if c.changed]

    @property
    def any(self) -> bool:
        return bool(self.changed or self.commands_add or self.commands_remove)


def load_state(home: Home) -> dict[str, Any]:
    """What connect did (`memd/connect-claude.json`); {} when nothing is known."""
    try:
        data = json.loads(read_regular(home.memd_dir / STATE_NAME, 1 << 20, follow=False))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _connect_file(path: Path, edit: Any, state: dict[str, Any]) -> FileChange:
    target, text, mode = read_config(path)
    new, record = edit(_base(text), path)
    earlier = (state.get("files") or {}).get(str(target)) or {}
    record = {"existed": earlier.get("existed", text is not None), "created": [*earlier.get("created", []),
              *record.pop("created", [])], **{k: v for k, v in earlier.items() if k not in ("existed", "created")},
              **record}  # fmt: skip
    return FileChange(path, target, text, text if new == _base(text) else new, mode, record)


def _disconnect_file(path: Path, edit: Any, state: dict[str, Any], backups: Path) -> FileChange:
    target, text, mode = read_config(path)
    record = (state.get("files") or {}).get(str(target))
    if text is None:
        return FileChange(path, target, None, None, mode)
    new = edit(_base(text), path, record)
    if new == _base(text):
        return FileChange(path, target, text, text, mode)
    if record is not None and not record.get("existed") and _empty_object(new):
        return FileChange(path, target, text, None, mode)
    # What is left differs from the file before connect at most in whitespace: its bytes come back.
    original = _read_backup(record.get("backup")) if record else _legacy_backup(backups, path.name, new)
    if original is not None and (jsontext.same(original, new) or (_empty_object(new) and not original.strip())):
        new = original
    return FileChange(path, target, text, new, mode)


def _empty_object(text: str) -> bool:
    try:
        return jsontext.loads(text.lstrip("\ufeff")) == {}
    except jsontext.JSONTextError:
        return False


def _read_backup(path: Any) -> str | None:
    if not isinstance(path, str):
        return None
    try:
        return read_regular(path, MAX_CONFIG_BYTES, follow=False).decode("utf-8")
    except (OSError, ValueError):
        return None


def _legacy_backup(backups: Path, name: str, text: str) -> str | None:
    """A connect of an older memd kept no record: a backup that differs from `text` only in
    whitespace is the file as it was, and its bytes come back."""
    try:
        found = sorted(backups.glob(f"{name}.*"), reverse=True)
    except OSError:
        return None
    for path in found[:5]:
        old = _read_backup(str(path))
        if old is not None and jsontext.same(old, text):
            return old
    return None


def plan_claude(home: Home, *, connect: bool, auto_memory: str = "keep") -> Plan:
    """What `connect claude` (or `disconnect claude`) would change; nothing is written.

    `auto_memory`: "off" writes `autoMemoryEnabled: false`; "keep" leaves Claude Code's
    auto-memory as the user has it (and undoes an earlier "off" of memd's).
    """
    plan = Plan()
    state = load_state(home)
    settings = home.settings_file
    backups = home.memd_dir / "backups"
    if connect:
        commands = {ev: (hook_command(home, sub), t) for ev, (sub, t) in HOOKS.items()}

        def edit_settings(text: str, path: Path) -> tuple[str, dict[str, Any]]:
            text, created = with_hooks(text, commands, path)
            earlier = ((state.get("files") or {}).get(str(read_config(path)[0])) or {}).get("auto_memory")
            record: dict[str, Any] = {"created": created}
            if auto_memory == "off":
                text, before = auto_memory_off(text, path)
                record["auto_memory"] = earlier or before
            else:
                text = auto_memory_back(text, path, earlier)
                record["auto_memory"] = None
            return text, record

        plan.changes.append(_connect_file(settings, edit_settings, state))
    else:

        def unedit_settings(text: str, path: Path, record: dict[str, Any] | None) -> str:
            text = without_hooks(text, path, record.get("created") if record else None)
            return auto_memory_back(text, path, (record or {}).get("auto_memory"))

        plan.changes.append(_disconnect_file(settings, unedit_settings, state, backups))
    cj = claude_json_path(home)
    try:
        if connect:
            plan.changes.append(_connect_file(cj, lambda t, p: _created(with_server(t, mcp_server_entry(home), p)), state))
        else:
            plan.changes.append(_disconnect_file(
                cj, lambda t, p, r: without_server(t, p, r.get("created") if r else None), state, backups))  # fmt: skip
    except RefusedFile as exc:
        if not connect:
            raise
        argv = memd_argv(home)
        plan.notes.append(f"{exc}. Register the MCP server yourself: "
                          f"claude mcp add --scope user {SERVER} -- {shlex.join([*argv, 'mcp'])}")  # fmt: skip
    _plan_commands(home, plan, state, connect)
    return plan


def _created(result: tuple[str, list[list[str]]]) -> tuple[str, dict[str, Any]]:
    return result[0], {"created": result[1]}


def _plan_commands(home: Home, plan: Plan, state: dict[str, Any], connect: bool) -> None:
    """The pause commands: created where absent; removed only when connect created them and
    they still hold what it wrote (a file the user made or edited is theirs)."""
    ours = state.get("commands") or {}
    for name in COMMANDS:
        path = home.root / "commands" / f"{name}.md"
        try:
            current = path.read_bytes() if path.is_file() and not path.is_symlink() else None
        except OSError:
            current = None
        mine = ours.get(str(path)) is not None and current is not None and ours[str(path)] == _sha(current)
        if connect and not os.path.lexists(path):
            plan.commands_add[path] = command_text(name)
        elif connect and not mine and str(path) not in ours:
            plan.kept_commands.append(name)
        elif not connect and mine:
            plan.commands_remove.append(path)
        elif not connect and str(path) in ours and current is not None:
            plan.notes.append(f"{path} changed since connect created it; left in place")


def apply(plan: Plan, home: Home, now: datetime) -> list[tuple[FileChange, Path | None]]:
    """Write the changed files (backup first, then an atomic replace in the file's own mode),
    the pause commands, and the record of what connect did; (change, backup) each."""

    done: list[tuple[FileChange, Path | None]] = []
    stamp = now.strftime("%Y%m%dT%H%M%S%fZ")
    state = load_state(home)
    files = state.setdefault("files", {})
    connecting = any(ch.record for ch in plan.changes) or bool(plan.commands_add)
    for ch in plan.changes:
        backup = None
        if ch.changed and ch.old_text is not None:
            ensure_private_dir(home.memd_dir / "backups")
            backup = home.memd_dir / "backups" / f"{ch.path.name}.{stamp}"
            atomic_write(backup, ch.old_text)
        if ch.changed and ch.new_text is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(ch.target)
        elif ch.changed and ch.new_text is not None:
            atomic_write(ch.target, ch.new_text, mode=ch.mode if ch.mode is not None else PRIVATE_FILE)
            if ch.mode is not None:
                os.chmod(ch.target, ch.mode)  # the umask does not narrow a mode the file had
        if ch.changed:
            done.append((ch, backup))
        if ch.record:
            earlier = files.get(str(ch.target)) or {}
            files[str(ch.target)] = {**ch.record, "backup": earlier.get("backup") or (str(backup) if backup else None),
                                     "mode": earlier.get("mode", ch.mode),
                                     "after": _sha(ch.new_text if ch.new_text is not None else "")}  # fmt: skip
    commands = state.setdefault("commands", {})
    for path, text in plan.commands_add.items():
        ensure_dir = not path.parent.exists()
        path.parent.mkdir(parents=True, exist_ok=True)
        if ensure_dir:
            state["commands_dir"] = str(path.parent)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except FileExistsError:
            continue  # made by the user meanwhile: theirs
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        commands[str(path)] = _sha(text)
    for path in plan.commands_remove:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        commands.pop(str(path), None)
    if not connecting:
        _forget_state(home, state)
        return done
    ensure_private_dir(home.memd_dir)
    atomic_write(home.memd_dir / STATE_NAME, json.dumps(state, indent=2) + "\n")
    return done


def _forget_state(home: Home, state: dict[str, Any]) -> None:
    """After a disconnect: the commands directory connect made goes if empty, and so does the record."""
    made = state.get("commands_dir")
    if isinstance(made, str) and not state.get("commands"):
        with contextlib.suppress(OSError):
            os.rmdir(made)  # only when empty
    with contextlib.suppress(FileNotFoundError):
        os.unlink(home.memd_dir / STATE_NAME)


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
