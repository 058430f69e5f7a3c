"""Real processes for tests: the daemon, `memd` commands, and waiting on its log."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import structlog
from click.testing import CliRunner

from memd.cli import main
from memd.daemon.loop import STOP_GRACE_SECONDS
from memd.logs.events import shutdown
from tests.conftest import memd_cmd


def memd_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.setdefault("MEMD_SEMANTIC", "off")  # memd[semantic]: only tests/index/test_semantic.py's daemons load the model
    env.setdefault("MEMD_TEST_AGENT_QUIET_SECONDS", "0")  # memd.index.hold: see tests/conftest.py
    env.update(extra)
    return env


# The one knob for every kill -9 loop: MEMD_TEST_KILL_SCALE=0.25 runs a quarter of each loop's rounds
# (and asks for a quarter of the kills that must land). .ci/run runs them whole.
KILL_SCALE = float(os.environ.get("MEMD_TEST_KILL_SCALE", "1") or 1)


_MODULES_PROBE = """
import json, os, runpy, sys
watched = set(json.loads(sys.argv.pop(1)))
sys.argv = ["memd", *sys.argv[1:]]
def report():
    print(json.dumps(sorted(m for m in sys.modules if m in watched)), file=sys.stderr, flush=True)
leave, me = os._exit, os.getpid()
def reported_exit(code):  # a plain `memd scan` or `memd list --json` ends through os._exit (memd.__main__._leave)
    if os.getpid() == me:  # not a scan's forked worker, which ends through os._exit too
        report()
    leave(code)
os._exit = reported_exit
try:
    runpy.run_module("memd", run_name="__main__")
except SystemExit as exc:
    code = exc.code
report()
"""


def modules_loaded(home: Path, watched: tuple[str, ...], *args: str, timeout: float = 120) -> tuple[list[str], str]:
    """Run `memd --home HOME ARGS` in a fresh interpreter; which of `watched` it imported, and its stdout."""
    r = subprocess.run([sys.executable, "-c", _MODULES_PROBE, json.dumps(watched), "--home", str(home), *args],
                       capture_output=True, text=True, env=memd_env(), timeout=timeout)  # fmt: skip
    return json.loads(r.stderr.strip().splitlines()[-1]), r.stdout


def kill_rounds(n: int) -> int:
    """`n` rounds of a kill loop, scaled by MEMD_TEST_KILL_SCALE (at least one)."""
    return max(1, round(n * KILL_SCALE))


# The one knob for the CLI in tests: MEMD_TEST_CLI=process runs every `run_memd` as a real process.
IN_PROCESS = os.environ.get("MEMD_TEST_CLI", "in-process") != "process"
_cli_mu = threading.Lock()


def run_memd(home: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 120,
             process: bool = False) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """A `memd` command's exit code, stdout and stderr.

    In this process through click's CliRunner unless `process` (or MEMD_TEST_CLI=process) asks
    for a real one: what is tested is the command, not an interpreter's start-up. Calls from
    other threads always start a process (CliRunner swaps sys.stdout for the whole process).
    Exit codes, hook output isolation, start-up, kill -9 and the daemon are tested with processes.
    """
    if process or not IN_PROCESS or threading.current_thread() is not threading.main_thread():
        return subprocess.run([*memd_cmd(), "--home", str(home), *args], capture_output=True, text=True,
                              env=env or memd_env(), timeout=timeout)  # fmt: skip
    return invoke(["--home", str(home), *args], env=env)


@contextlib.contextmanager
def _uncached_loggers() -> Iterator[None]:
    """A command configures structlog to cache each logger on first use, which is right for a
    process and wrong for a test process: a module's logger cached by one command would keep that
    command's processors (and escape `structlog.testing.capture_logs`) for every later test."""
    original = structlog.configure

    def configure(*args: Any, **kwargs: Any) -> None:
        original(*args, **{**kwargs, "cache_logger_on_first_use": False})

    structlog.configure = configure  # type: ignore[assignment]
    try:
        yield
    finally:
        structlog.configure = original  # type: ignore[assignment]


def invoke(args: list[str], *, env: dict[str, str] | None = None, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """memd's CLI in this process, answered as `subprocess.run` would: an exception that would
    end a real process with a traceback gives exit code 1 and the traceback on stderr."""
    wanted = env or memd_env()
    changes: dict[str, str | None] = {k: v for k, v in wanted.items() if os.environ.get(k) != v}
    changes.update({k: None for k in os.environ if k not in wanted})
    with _cli_mu, _uncached_loggers():
        result = CliRunner().invoke(main, args, env=changes, input=input, prog_name="memd")
        shutdown()  # a command's log handlers write to its own home: detach them with it
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    return subprocess.CompletedProcess(["memd", *args], result.exit_code, result.stdout, stderr)


def log_records(home: Path) -> list[dict[str, Any]]:
    path = home / "memd" / "logs" / "memd.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


# How long a poll waits by default. Generous on purpose: CI is a loaded 2-core machine running two
# workers, and a wait that passes costs only the time the condition takes; a latency bound, where one
# matters, belongs in bench/, not in a poll's timeout.
WAIT_S = 120.0


def wait_for(pred: Callable[[], Any], timeout: float = WAIT_S, every: float = 0.05) -> Any:
    """Poll until `pred()` is truthy; no fixed sleeps in tests. Poll for the exact state asserted
    next, never for an earlier one (a job's writes land one after another)."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(every)


def wait_log(home: Path, timeout: float = WAIT_S, **match: Any) -> dict[str, Any]:
    def find() -> dict[str, Any] | None:
        for rec in log_records(home):
            if all(rec.get(k) == v for k, v in match.items()):
                return rec
        return None

    return wait_for(find, timeout)


class DaemonProc:
    """`memd run` as a real subprocess on a home."""

    def __init__(self, home: Path, env: dict[str, str] | None = None) -> None:
        self.home = home
        self.env = env or memd_env()
        self.proc: subprocess.Popen[str] | None = None
        self.stderr_lines: list[str] = []
        self._drain: threading.Thread | None = None

    def start(self) -> DaemonProc:
        self.proc = subprocess.Popen([*memd_cmd(), "--home", str(self.home), "run"], env=self.env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
        # Read stderr as it comes: a daemon logging at info fills a 64 KB pipe nobody reads, and then
        # blocks in a write with its locks held (it looked like a home that never settles).
        self._drain = threading.Thread(target=self._read_stderr, daemon=True)
        self._drain.start()
        # Its own pid file: one a kill -9 left behind (the crash loops) exists before this daemon has set up
        # its signals, and a SIGTERM then was the default action's death (-15), not a clean stop.
        wait_for(lambda: self._pid_file_is_mine() or self.proc.poll() is not None)
        if self.proc.poll() is not None:
            self._drain.join(5)
        assert self.proc.poll() is None, "".join(self.stderr_lines)
        return self

    def _pid_file_is_mine(self) -> bool:
        assert self.proc is not None
        try:
            return json.loads((self.home / "memd" / "daemon.json").read_text()).get("pid") == self.proc.pid
        except (OSError, ValueError, AttributeError):
            return False  # not there yet, or half written

    def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_lines.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self.stderr_lines)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_GRACE_SECONDS + 30) -> int:
        """Signal the daemon and wait for its exit. A SIGTERM lets a job in flight finish (up to the
        daemon's own grace), so the wait is longer than that grace, not a guess at how fast it is."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout)
        if self._drain is not None:
            self._drain.join(5)
        return code

    def __enter__(self) -> DaemonProc:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self._drain is not None:
            self._drain.join(5)


class FakeApiProc:
    """tests/fakeapi.py as a separate process, for a daemon that is itself a process."""

    def __init__(self, tmp: Path, script: dict[str, Any]) -> None:
        self.tmp = tmp
        self.script_path = tmp / "fake-script.json"
        self.port_file = tmp / "fake-port"
        self.record = tmp / "fake-requests.jsonl"
        self.script_path.write_text(json.dumps(script))
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> FakeApiProc:
        here = Path(__file__).parent
        self.proc = subprocess.Popen([sys.executable, str(here / "fakeapi.py"), "--port-file", str(self.port_file),
                                      "--script", str(self.script_path), "--record", str(self.record)])  # fmt: skip
        wait_for(lambda: self.port_file.exists() and self.port_file.read_text().strip())
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port_file.read_text().strip()}"

    def requests(self) -> list[dict[str, Any]]:
        """The requests recorded so far. A line still being appended (no newline yet) is left for
        the next call: a poller can read the file between two parts of one large write."""
        if not self.record.exists():
            return []
        text = self.record.read_text()
        return [json.loads(x) for x in text[: text.rfind("\n") + 1].splitlines() if x.strip()]

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
