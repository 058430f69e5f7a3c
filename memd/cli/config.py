"""`memd config` (the effective settings) and `memd key` (a directory's project key)."""

from __future__ import annotations

import sys
from typing import Any

import click

from memd.cli import command, get_home, json_out
from memd.errors import ConfigError


@command("key")
@click.argument("path", required=False, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Also the transcript key, the realpath and the root.")
def key_cmd(path: str | None, as_json: bool) -> None:
    """Print the memory key of PATH (default: the current directory): its canonical git root's,
    the directory the agent reads MEMORY.md from."""
    from memd.keys import canonical_root, cwd_key, project_key

    target = path or "."
    if not as_json:
        click.echo(project_key(target))
        return
    import os

    json_out({"path": os.path.abspath(target), "realpath": os.path.realpath(target),
              "transcript_key": cwd_key(target), "root": str(canonical_root(target)),
              "memory_key": project_key(target)})  # fmt: skip


@command("config")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@click.option("--check", is_flag=True, help="Exit 5 listing problems if any field is invalid.")
@click.pass_context
def config_cmd(ctx: click.Context, as_json: bool, check: bool) -> None:
    """Print the effective settings (settings.json's `memory` and `memd` objects, with defaults)."""
    from memd import settings as st

    home = get_home(ctx)
    s = st.load(home.settings_file)
    if check:
        for w in s.warnings:
            click.echo(w, err=True)
        if s.warnings or s.broken:
            sys.exit(ConfigError.exit_code)
        if not s.strict_json and st.looks_like_claude_home(home.root):
            click.echo(f"warning: {home.settings_file} has comments or trailing commas; Claude Code shares this "
                       "file and ignores it entirely unless it is strict JSON", err=True)  # fmt: skip
        click.echo(f"{home.settings_file}: ok")
        return
    if as_json:
        json_out({**s.as_dict(), "warnings": s.warnings, "file": str(home.settings_file)})
        return
    for w in s.warnings:
        click.echo(f"warning: {w}", err=True)
    _print_tree(s.as_dict())


def _print_tree(d: dict[str, Any], prefix: str = "") -> None:
    for k, v in d.items():
        if isinstance(v, dict):
            _print_tree(v, f"{prefix}{k}.")
        else:
            click.echo(f"{prefix}{k} = {v!r}" if isinstance(v, str) else f"{prefix}{k} = {str(v).lower() if isinstance(v, bool) else v}")
