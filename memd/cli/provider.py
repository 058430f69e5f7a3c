"""`memd provider [NAME]`: which model provider memd uses, and the one command that switches it.

`memd status` and `memd doctor` offer a logged-in Claude Code memd does not use (SPEC §15: memd
never switches to it by itself, its calls count against the user's plan); this is the switch:
`memd provider claude-code` sets `memd.provider` in the settings file and asks a running daemon
to reload its settings (SIGHUP).

The write keeps everything else of the file: it is rewritten only when it is strict JSON (a
Claude Code home's always is); a file with comments or trailing commas is left alone with the
line to add, since rewriting it would drop the comments. The previous bytes are kept in
`memd/settings.previous.json` (the undo), the new file replaces the old atomically with the old
file's permissions.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import click

from memd.cli import command, get_home, json_out
from memd.errors import ConfigError

CHOICES = ("auto", "anthropic", "offline", "claude-code")
PREVIOUS = "settings.previous.json"


def switched(raw: str | None, name: str, path: Path) -> str:
    """Pure: the settings text with `memd.provider` set to `name`, every other byte as it was (the file
    may be Claude Code's own `settings.json`: its layout, line ends, key order and number spellings
    stay; only memd's one member is spliced in, `memd/agent/jsontext.py`). ConfigError when it cannot
    be edited without loss (not strict JSON, not an object, a duplicated key)."""
    from memd.agent import jsontext as jt

    hint = f'add "memd": {{"provider": "{name}"}} by hand'
    text = raw if raw and raw.strip() else "{}\n"
    try:
        root = jt.top(text)
    except jt.JSONTextError as exc:
        raise ConfigError(f"{path}: not strict JSON ({exc}): memd does not rewrite it; {hint}") from None
    if not isinstance(root.value, dict) or jt.duplicates(text, root, "memd"):
        raise ConfigError(f'{path}: the file is not a JSON object, or has "memd" twice; {hint}')
    memd = jt.member(text, root, "memd")
    if memd is None:
        return jt.insert_member(text, root, "memd", {"provider": name})
    if not isinstance(memd.value.value, dict) or jt.duplicates(text, memd.value, "provider"):
        raise ConfigError(f'{path}: "memd" is not a JSON object, or has "provider" twice; {hint}')
    current = jt.member(text, memd.value, "provider")
    if current is None:
        return jt.insert_member(text, memd.value, "provider", name)
    return jt.replace_value(text, current.value, name)


@command("provider")
@click.argument("name", required=False, type=click.Choice(CHOICES))
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def provider_cmd(ctx: click.Context, name: str | None, as_json: bool) -> None:
    """Show the model provider, or switch it to NAME (auto, anthropic, offline, claude-code)."""
    from memd import settings as st
    from memd.daemon.lock import daemon_alive
    from memd.fsutil import atomic_write

    home = get_home(ctx)
    path = home.settings_file
    before = st.load(path).memd.provider
    reloaded = False
    if name is not None and name != before:
        try:
            raw = path.read_bytes().decode("utf-8") if path.is_file() else None  # bytes: CRLF stays CRLF
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not UTF-8 (byte {exc.start}); memd does not rewrite it") from None
        text = switched(raw, name, path)
        mode = (path.stat().st_mode & 0o777) if path.is_file() else 0o600
        if path.is_symlink():
            raise ConfigError(f'{path}: a symlink; memd does not replace it: add "memd": {{"provider": "{name}"}} '
                              "where it points")  # fmt: skip
        if raw is not None:
            atomic_write(home.memd_dir / PREVIOUS, raw)
        atomic_write(path, text, mode=mode)
        info = daemon_alive(home)
        if info is not None and info.get("pid"):
            try:
                os.kill(int(info["pid"]), signal.SIGHUP)
                reloaded = True
            except (OSError, ValueError):
                pass
    s = st.load(path)
    effective, waiting = st.effective_provider(s, memd_dir=home.memd_dir)
    out = {"configured": s.memd.provider, "effective": effective, "waiting": waiting, "previous": before,
           "daemon_reloaded": reloaded, "settings_file": str(path)}  # fmt: skip
    if as_json:
        json_out(out)
        return
    if name is not None and name != before:
        click.echo(f"memd.provider: {before} → {name} in {path} (the previous file: {home.memd_dir / PREVIOUS})"
                   + ("; the daemon reloads its settings" if reloaded else ""))  # fmt: skip
    click.echo(f"provider: {effective}" + (" (configured auto)" if s.memd.provider == "auto" else "")
               + (f" — {waiting}" if waiting else ""))  # fmt: skip
