"""The `memd` program: the `memd` script (pyproject's `[project.scripts]`) and `python -m memd`.

The agent hooks start a process on every session start and every prompt, so their command
lines — exactly as `memd connect` writes them, `memd [--home H] context|recall|precompact --hook`
— run without click (about 15 ms of imports, more than the hook's own work): `hook_call`
recognises them and `memd.agent.hooks.command` runs them, the code the click commands run for
`--hook`. Any other command line goes to the click CLI (`memd.cli.main`) unchanged, and so does
any that click would treat otherwise than a hook form: another option (`--agent`, `--help`), a
`--home` value click's path check refuses (a file, an unreadable directory) or one that looks
like an option. Invariant: for every argv `hook_call` accepts, the output, side effects and exit
code are those of the click command (tests/cli/test_hook_entry.py runs both).

`memd [--home H] scan [--json]` runs without click the same way (`plain_call`, then
`memd.ledger.scan.command`, the code of the click command; tests/cli/test_scan_entry.py runs both), and
so does `memd [--home H] list [--all] --json` (`plain_call`, then `memd.index.listing`, the document the
click command writes; tests/cli/test_list_entry.py runs both).

Before that, `context` and `recall` ask the running daemon (`memd.agent.hookwire`): when it answers, the
process writes the answer and exits without loading the hooks' modules; when not, it answers itself.

This module imports nothing at the top: everything it loads is on the hooks' path.
"""

from __future__ import annotations

HOOK_COMMANDS = frozenset({"context", "recall", "precompact"})  # memd.agent.connect.SUBCOMMANDS (a test holds them equal)


_PLAIN = frozenset({"scan", "list"})  # run without click (`plain_call`)


def _usable_home_value(value: str) -> bool:
    """Whether click's `--home` type (`click.Path(file_okay=False)`) takes `value` as it is: absent,
    or there and neither a regular file nor unreadable. An option-like value is left to click too."""
    import os
    import stat

    if value.startswith("-"):
        return False
    try:
        st = os.stat(value)
    except (OSError, ValueError):
        return True
    return not stat.S_ISREG(st.st_mode) and os.access(value, os.R_OK)


def _plain_call(args: list[str], subs: frozenset[str], flags: tuple[str, ...]) -> tuple[str, str | None, dict[str, int]] | None:
    """(sub-command, `--home` value or None, how often each of `flags` came) when `args` (argv after the
    program) is `--home` options, one of `subs`, then `flags` and `--home` options in any order; else None,
    and click runs it. As in click, the group's last `--home` counts, the command's last one wins over it,
    and an empty one counts as none; a value click's path check would refuse is left to click."""
    homes: tuple[list[str], list[str]] = ([], [])  # the group's, the command's
    sub: str | None = None
    seen = dict.fromkeys(flags, 0)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--home" or arg.startswith("--home="):
            if arg == "--home" and i + 1 == len(args):
                return None
            value = args[i + 1] if arg == "--home" else arg[len("--home=") :]
            if not _usable_home_value(value):
                return None
            homes[sub is not None].append(value)
            i += 2 if arg == "--home" else 1
        elif arg in seen and sub is not None:
            seen[arg] += 1
            i += 1
        elif arg in subs and sub is None:
            sub = arg
            i += 1
        else:
            return None
    if sub is None:
        return None
    group, own = homes
    return sub, (own[-1] if own else "") or (group[-1] if group else "") or None, seen


def hook_call(args: list[str]) -> tuple[str, str | None] | None:
    """(sub-command, `--home` value or None) when `args` is a hook's command line — `--home` options, the
    sub-command, then one `--hook` and `--home` options in any order — else None (`_plain_call`)."""
    call = _plain_call(args, HOOK_COMMANDS, ("--hook",))
    return None if call is None or call[2]["--hook"] != 1 else (call[0], call[1])


def plain_call(args: list[str]) -> tuple[str, str | None, bool] | None:
    """("scan", `--home` value or None, whether `--json`) for `memd scan`'s plain command line, ("list", `--home`
    value or None, whether `--all`) for `memd list`'s plain JSON one, else None: click runs it. Plain: `--home`
    options, the sub-command, then its flags and `--home` options in any order (`scan`: `--json`; `list`:
    `--json` at least once, `--all`). Click gets the rest: `--project`, `--help`, the table, a `--home`
    click's path check refuses … One parse of the command line for both (`_plain_call`)."""
    call = _plain_call(args, _PLAIN, ("--all", "--json"))
    if call is None:
        return None
    sub, home, seen = call
    if sub == "scan":
        return None if seen["--all"] else (sub, home, seen["--json"] > 0)
    return (sub, home, seen["--all"] > 0) if seen["--json"] else None


def scan_call(args: list[str]) -> tuple[str | None, bool] | None:
    """(`--home` value or None, whether `--json`) when `args` is `memd scan`'s plain command line (`plain_call`)."""
    call = plain_call(args)
    return None if call is None or call[0] != "scan" else (call[1], call[2])


def list_call(args: list[str]) -> tuple[str | None, bool] | None:
    """(`--home` value or None, whether `--all`) when `args` is `memd list`'s plain JSON command line (`plain_call`)."""
    call = plain_call(args)
    return None if call is None or call[0] != "list" else (call[1], call[2])


def list_command(home_value: str | None, everything: bool) -> int | None:
    """`memd [--home H] list [--all] --json` without click (`memd.index.listing`, the document the click
    command writes, and written as `memd.cli.json_out` writes it): click and `memd.cli` are about a
    third of a listing's start-up. None leaves the command line to click, which answers it whole: a
    home that is missing or not a directory, a text-only stdout, or any error met before a byte is
    written (a listing only reads). Once writing, it ends as the click command ends: a reader gone
    before the first byte is exit 1, silently; ^C is "Aborted!" and exit 1; any other write error
    propagates, as it does from `json_out`."""
    import sys

    try:
        return _plain_list(home_value, everything)
    except KeyboardInterrupt:  # as click's standalone mode answers it
        sys.stderr.write("\nAborted!\n")
        return 1


def _plain_list(home_value: str | None, everything: bool) -> int | None:
    """`list_command`'s work (KeyboardInterrupt aside)."""
    import sys

    import orjson

    from memd.clock import system_clock
    from memd.collector import paused
    from memd.index.listing import listing_document
    from memd.keys import project_key
    from memd.tree import Home, resolve_home

    with paused():  # as the click command: a listing's objects hold no cycle (`listing_document`)
        try:
            root = resolve_home(home_value)
            if not root.is_dir():
                return None
            pkey = None if everything else project_key(".")
            doc = listing_document(Home(root), pkey, everything, system_clock().timestamp())
            out = orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
        except Exception:
            return None
        buffer = getattr(sys.stdout, "buffer", None)
        if buffer is None:  # a text-only stdout: click's `json_out` knows that one
            return None
        try:
            buffer.write(out)
            buffer.flush()
        except BrokenPipeError:  # the reader gone before the first byte: click's standalone mode exits 1, silently
            return 1
    return 0


def scan_command(home_value: str | None, as_json: bool) -> int | None:
    """`memd [--home H] scan [--json]` without click (a first scan is timed against tools that start
    in 40 ms; click and `memd.cli` are 17 more): the click command's work and output on an existing
    home. None leaves the command line to click — a home that is missing or not a directory (click's
    usage error says so), or any error the scan meets (click's handling reports it; the scan is
    idempotent, so what was committed is not read again)."""
    import gc

    gc.disable()  # a scan makes no cycles worth collecting (memd.ledger.scan), nor do its imports: 3-4 ms of
    code = _plain_scan(home_value, as_json)  # collections among them
    if code is None:
        gc.enable()  # click runs the command line as any other
    return code


def _plain_scan(home_value: str | None, as_json: bool) -> int | None:
    """`scan_command`'s work, with the cyclic collector off."""
    import sys

    import orjson

    from memd.ledger.scan import DeferredLog, scan_home, summary_line
    from memd.tree import Home, resolve_home

    root = resolve_home(home_value)
    if not root.is_dir():
        return None
    home = Home(root)

    def setup() -> object:  # on the first warning only, as the click command does
        from memd.cli import cli_logging
        from memd.logs.events import get_logger

        cli_logging(home, "warning")
        return get_logger("memd.scan")

    try:
        totals = scan_home(home, progress=not as_json, log=DeferredLog(setup))
    except KeyboardInterrupt:  # as click's standalone mode answers it
        sys.stderr.write("\nAborted!\n")
        return 1
    except Exception:
        return None
    out = orjson.dumps(totals, option=orjson.OPT_INDENT_2).decode() if as_json else summary_line(totals)
    sys.stdout.write(out + "\n")
    sys.stdout.flush()
    return 0


def main() -> None:
    """Run `memd` with `sys.argv`: a hook, a plain `memd scan` or `memd list --json`, without click; anything else
    through click."""
    import sys

    call = hook_call(sys.argv[1:])
    if call is None:
        _site()
        plain = plain_call(sys.argv[1:])
        code = None if plain is None else (scan_command if plain[0] == "scan" else list_command)(plain[1], plain[2])
        if code is not None:
            _leave(code)
        from memd.cli import main as cli

        cli()
        return
    sub, home = call
    stdin = None
    if sub != "precompact":
        from memd.agent import hookwire

        try:
            raw = sys.stdin.buffer.read(hookwire.MAX_STDIN)
        except Exception:
            raw = None  # the in-process hook meets the same and says so
        answered = hookwire.ask(sub, home, raw) if raw is not None else None
        if answered is not None:
            sys.exit(_write(*answered))
        if raw is not None:
            import io

            stdin = io.BytesIO(raw)
    _site()
    from memd.agent import hooks

    sys.exit(hooks.command(sub, hooks.find_home(home), stdin=stdin))


def _site() -> None:
    """`site`'s work, when the interpreter started without it (`-S`: the hook program `memd connect` writes,
    memd.agent.connect.hook_argv): the venv, site-packages and their .pth files, sitecustomize, exactly as a
    start with `site` does them. Only what memd loads beyond its own hook client needs them; a hook the daemon
    answers exits before this. The directory the hook program appended (memd's, last on the path) is taken off
    first and `site` puts it where a plain start has it: a site directory that comes before it (the user site
    before the system's dist-packages, a venv's own before its base's) keeps its packages first."""
    import sys

    if sys.flags.no_site and "site" not in sys.modules:
        import os
        import site

        memd = sys.modules.get("memd")
        here = getattr(memd, "__file__", None)
        root = os.path.dirname(os.path.dirname(os.path.abspath(here))) if here else None
        appended = root is not None and sys.path[-1:] == [root]
        if appended:
            sys.path.pop()
        site.main()
        if appended and root is not None and root not in sys.path:  # not a site directory (a checkout): where the program had it
            sys.path.append(root)


def _leave(code: int) -> None:
    """End a plain `memd scan` or `memd list --json` with `code`. Its output is flushed (and a scan's
    ledger committed and closed) by now, so unless it set logging up (a warning: logging's handlers flush at exit) the process ends
    without the interpreter's finalisation: freeing every object and module of a scan's process took
    15–20 ms after a first scan of 100 MB, more than the plain orjson loop's whole start."""
    import os
    import sys

    if "logging" in sys.modules:
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


def _write(code: int, out: bytes, err: bytes) -> int:
    """Write the daemon's answer as the hook process would have (`memd.agent.hooks.run`): a failed write is
    dropped, never an error."""
    import sys

    for stream, data in ((sys.stdout, out), (sys.stderr, err)):
        if data:
            try:
                stream.buffer.write(data)
                stream.flush()
            except Exception:
                pass
    return code


if __name__ == "__main__":
    main()
