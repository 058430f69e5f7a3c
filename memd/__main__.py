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
click command writes; tests/cli/test_list_entry.py runs both), and `memd [--home H] run-now JOB` with its
target options and flags (`run_now_call`, then `memd.daemon.runnow.run_now`, the click command's work;
tests/cli/test_run_now_entry.py runs both). Their lines go out through `memd.output`, as `click.echo` and
`json_out` write them, and they end through `_leave` (no interpreter finalisation).

Before that, `context` and `recall` ask the running daemon (`memd.agent.hookwire`): when it answers, the
process writes the answer and exits without loading the hooks' modules; when not, it answers itself.

This module imports nothing at the top: everything it loads is on the hooks' path.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not `typing`'s: this module imports nothing at the top (mypy and ruff know the name)
if TYPE_CHECKING:
    from memd.daemon.runnow import Request
    from memd.tree import Home

HOOK_COMMANDS = frozenset({"context", "recall", "precompact"})  # memd.agent.connect.SUBCOMMANDS (a test holds them equal)


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


class _Call:
    """A plain command line as `_plain_call` read it."""

    __slots__ = ("home", "positional", "seen", "sub", "values")

    def __init__(self, sub: str, home: str | None, seen: dict[str, int], values: dict[str, str], positional: list[str]) -> None:
        self.sub, self.home, self.seen, self.values, self.positional = sub, home, seen, values, positional


# What a plain command line of each sub-command may hold after it: its flags, its options with a value, and
# how many positional arguments (exactly).
_Spec = tuple[tuple[str, ...], tuple[str, ...], int]
_HOOKS: dict[str, _Spec] = dict.fromkeys(HOOK_COMMANDS, (("--hook",), (), 0))
_PLAIN: dict[str, _Spec] = {
    "scan": (("--json",), (), 0),
    "list": (("--all", "--json"), (), 0),
    "run-now": (("--global", "--all", "--force", "--no-wait", "--json"), ("--project", "--session"), 1),
}  # run without click (`plain_call`)


def _plain_call(args: list[str], specs: dict[str, _Spec]) -> _Call | None:
    """The sub-command, its `--home` value (or None), how often each of its flags came, the last value of
    each of its options given, and its positional arguments, when `args` (argv after the program) is
    `--home` options, a sub-command of `specs`, then its flags, its options (`--opt V` or `--opt=V`),
    `--home` options and exactly its number of positional arguments, in any order; else None, and click
    runs it. As in click, the group's last `--home` counts, the command's last one wins over it, and an
    empty one counts as none; an option's value is the next argument, whatever it looks like (`--project
    -p`: project keys start with a dash). Left to click: a `--home` value click's path check would refuse,
    a positional argument that looks like an option (`--`, `-x`), too few or too many of them."""
    homes: tuple[list[str], list[str]] = ([], [])  # the group's, the command's
    sub: str | None = None
    seen: dict[str, int] = {}
    valued: tuple[str, ...] = ()
    values: dict[str, str] = {}
    rest: list[str] = []
    wanted = 0
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, inline = arg.partition("=")
        if name == "--home" or name in valued:
            if not eq and i + 1 == len(args):
                return None
            value = inline if eq else args[i + 1]
            if name != "--home":
                values[name] = value  # whatever it looks like: click takes the next argument as the value too
            elif _usable_home_value(value):
                homes[sub is not None].append(value)
            else:
                return None
            i += 1 if eq else 2
        elif arg in seen:
            seen[arg] += 1
            i += 1
        elif sub is None and arg in specs:
            sub = arg
            flags, valued, wanted = specs[sub]
            seen = dict.fromkeys(flags, 0)
            i += 1
        elif sub is not None and len(rest) < wanted and not arg.startswith("-"):
            rest.append(arg)
            i += 1
        else:
            return None
    if sub is None or len(rest) != wanted:
        return None
    group, own = homes
    home = (own[-1] if own else "") or (group[-1] if group else "") or None
    return _Call(sub, home, seen, values, rest)


def hook_call(args: list[str]) -> tuple[str, str | None] | None:
    """(sub-command, `--home` value or None) when `args` is a hook's command line — `--home` options, the
    sub-command, then one `--hook` and `--home` options in any order — else None (`_plain_call`)."""
    call = _plain_call(args, _HOOKS)
    return None if call is None or call.seen["--hook"] != 1 else (call.sub, call.home)


def plain_call(args: list[str]) -> _Call | None:
    """`args` (argv after the program) when it is a command line run without click, read (`_plain_call`):
    `memd scan [--json]`, `memd list [--all] --json`, `memd run-now JOB [target and flags]`, each with
    `--home` options anywhere; else None. Click gets the rest: `memd list`'s table, `--help`, a `--home`
    click's path check refuses … One parse of the command line for all of them."""
    call = _plain_call(args, _PLAIN)
    return None if call is None or (call.sub == "list" and not call.seen["--json"]) else call


def scan_call(args: list[str]) -> tuple[str | None, bool] | None:
    """(`--home` value or None, whether `--json`) when `args` is `memd scan`'s plain command line (`plain_call`)."""
    call = plain_call(args)
    return None if call is None or call.sub != "scan" else (call.home, call.seen["--json"] > 0)


def list_call(args: list[str]) -> tuple[str | None, bool] | None:
    """(`--home` value or None, whether `--all`) when `args` is `memd list`'s plain JSON command line (`plain_call`)."""
    call = plain_call(args)
    return None if call is None or call.sub != "list" else (call.home, call.seen["--all"] > 0)


def run_now_call(args: list[str]) -> tuple[str | None, Request] | None:
    """(`--home` value or None, `memd.daemon.runnow.Request`) when `args` is a plain `memd run-now` command
    line (`plain_call`): JOB, `--project KEY`, `--session ID` (the last of each), `--global`, `--all`,
    `--force`, `--no-wait`, `--json`, in any order."""
    call = plain_call(args)
    return None if call is None or call.sub != "run-now" else (call.home, _request(call))


def _request(call: _Call) -> Request:
    from memd.daemon.runnow import Request

    seen, values = call.seen, call.values
    return Request(call.positional[0], values.get("--project"), values.get("--session"), seen["--global"] > 0,
                   seen["--all"] > 0, seen["--force"] > 0, seen["--no-wait"] > 0, seen["--json"] > 0)  # fmt: skip


def _run_plain(call: _Call) -> int | None:
    """Run a plain command line (`plain_call`) without click: its exit code, or None to leave it to click."""
    if call.sub == "scan":
        return scan_command(call.home, call.seen["--json"] > 0)
    if call.sub == "list":
        return list_command(call.home, call.seen["--all"] > 0)
    return run_now_command(call.home, _request(call))


def run_now_command(home_value: str | None, request: Request) -> int | None:
    """`memd run-now` without click (`memd.daemon.runnow.run_now`, the click command's work), ended as
    the click command ends: a `MemdError` is its one line and exit code, a locked database exit 75, ^C
    "Aborted!" and exit 1, a reader gone exit 1, silently; anything else a bug's traceback. None leaves
    the command line to click when the home is missing or not a directory (click's usage error)."""

    from memd.tree import Home, resolve_home

    root = resolve_home(home_value)
    if not root.is_dir():
        return None
    try:
        return _run_now(Home(root), request)
    except KeyboardInterrupt:
        _aborted()
        return 1
    except BrokenPipeError:  # as click's standalone mode: its streams quietened, exit 1
        _quiet_streams()
        return 1


def _run_now(home: Home, request: Request) -> int:
    """`run_now_command`'s work and its errors' one-line answers (`memd.cli.handles_errors`)."""
    import sqlite3

    from memd.daemon.runnow import exit_code_of, run_now
    from memd.errors import MemdError
    from memd.logs.events import cli_defaults
    from memd.output import echo, error_answer, json_out

    def warn(line: str) -> None:
        echo(line, err=True)

    cli_defaults()  # as the click group does for a command that logs: warnings before `configure` to stderr
    try:
        results = run_now(home, request, say=echo, warn=warn)
    except (MemdError, sqlite3.OperationalError) as exc:
        answer = error_answer(exc)
        if answer is None:
            raise
        warn(answer[0])
        return answer[1]
    if request.as_json:
        json_out(results)
    return exit_code_of(results)


def _aborted() -> None:
    """What click's standalone mode writes on ^C: a newline and "Aborted!" on stderr; with no stderr, as
    `click.echo` then does, on stdout (`memd.output.echo`)."""
    import sys

    if sys.stderr is None:
        from memd.output import echo

        echo("\nAborted!")
        return
    sys.stderr.write("\nAborted!\n")
    sys.stderr.flush()


def _quiet_streams() -> None:
    """stdout and stderr made silent, as click does after a broken pipe (its `PacifyFlushWrapper`): the
    interpreter's last flush must not print a second error."""
    import os
    import sys

    devnull = open(os.devnull, "w")  # noqa: SIM115 - kept open until the process ends
    sys.stdout = sys.stderr = devnull


def list_command(home_value: str | None, everything: bool) -> int | None:
    """`memd [--home H] list [--all] --json` without click (`memd.index.listing`, the document the click
    command writes, and written as `memd.cli.json_out` writes it): click and `memd.cli` are about a
    third of a listing's start-up. None leaves the command line to click, which answers it whole: a
    home that is missing or not a directory, a text-only stdout, or any error met before a byte is
    written (a listing only reads). Once writing, it ends as the click command ends: a reader gone
    before the first byte is exit 1, silently; ^C is "Aborted!" and exit 1; any other write error
    propagates, as it does from `json_out`."""

    try:
        return _plain_list(home_value, everything)
    except KeyboardInterrupt:
        _aborted()
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
    idempotent, so what was committed is not read again). A reader gone before the totals are written:
    exit 1, silently, as click's standalone mode ends it."""
    import gc

    gc.disable()  # a scan makes no cycles worth collecting (memd.ledger.scan), nor do its imports: 3-4 ms of
    try:  # collections among them
        code = _plain_scan(home_value, as_json)
    except BrokenPipeError:
        _quiet_streams()
        return 1
    if code is None:
        gc.enable()  # click runs the command line as any other
    return code


def _plain_scan(home_value: str | None, as_json: bool) -> int | None:
    """`scan_command`'s work, with the cyclic collector off."""
    from memd.ledger.scan import DeferredLog, scan_home, summary_line
    from memd.output import echo, json_out
    from memd.tree import Home, resolve_home

    root = resolve_home(home_value)
    if not root.is_dir():
        return None
    home = Home(root)

    def setup() -> object:  # on the first warning only, as the click command does
        from memd.logs.events import command_logging, get_logger

        command_logging(home, "warning")
        return get_logger("memd.scan")

    try:
        totals = scan_home(home, progress=not as_json, log=DeferredLog(setup))
    except KeyboardInterrupt:
        _aborted()
        return 1
    except Exception:
        return None
    if as_json:
        json_out(totals)
    else:
        echo(summary_line(totals))
    return 0


def main() -> None:
    """Run `memd` with `sys.argv`: a hook, a plain `memd scan`, `memd list --json` or `memd run-now`, without click;
    anything else through click."""
    import sys

    call = hook_call(sys.argv[1:])
    if call is None:
        _site()
        _dataclasses()
        plain = plain_call(sys.argv[1:])
        code = None if plain is None else _run_plain(plain)
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
    _dataclasses()
    from memd.agent import hooks

    sys.exit(hooks.command(sub, hooks.find_home(home), stdin=stdin))


def _dataclasses() -> None:
    """Import dataclasses with its `inspect` deferred (`memd.logs.lazy.import_deferring`): dataclasses uses
    inspect only to write a docstring for a dataclass without one, and memd's all have one
    (tests/test_dataclass_docs.py keeps them so); inspect, with ast, dis and tokenize, is some 35 M
    instructions (6 ms here) of every command's start. A hook the daemon answers needs no dataclass: this runs
    after it asked."""
    from memd.logs.lazy import import_deferring

    import_deferring("dataclasses", ("inspect",))


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
    """End a plain command (`plain_call`) with `code`, without the interpreter's finalisation: freeing every
    object and module of the process took 15–20 ms after a first scan of 100 MB, more than the plain orjson
    loop's whole start, and 10–25 ms of a `memd run-now index` whose work is 50 ms. By now its output is
    written and its databases committed and closed; what the finalisation would still have done that
    counts runs first: the `atexit` functions (logging's flush and close of the log file, `weakref.finalize`
    callbacks) and the flush of stdout and stderr. A process with a thread still running that is not a
    daemon thread is left to `sys.exit`, which waits for it as a normal exit does."""
    import os
    import sys

    threading = sys.modules.get("threading")
    if threading is not None and any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(code)
    import atexit

    atexit._run_exitfuncs()  # CPython's own step at exit (multiprocessing calls it in its children too)
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
