"""The hook socket (issue 27 point 3): a running daemon answers `memd context --hook` and `memd recall --hook`
byte for byte as the hook process would, records each hook once, and a hook never fails or waits long because
of the daemon (absent, killed -9 mid-answer, stopped, of another version or environment: it answers itself).

Real parts: `memd run` as a process (DaemonProc), hook processes as Claude Code starts them (the event on stdin),
the loopback fake Messages API for a recall that calls a model. Whether the daemon answered is what the hook
process loaded (`-X importtime`): answering itself loads `memd.agent.hooks`, a daemon's answer does not.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memd import state
from memd.agent import hooks, hookwire
from memd.daemon.hook_server import read_request
from memd.index.refresh import refresh_all
from memd.keys import project_key
from memd.memory.file import render_memory, write_memory
from memd.tree import Home
from tests.cli.test_hook_entry import event
from tests.fakeapi import FakeAnthropic, json_text
from tests.procs import DaemonProc, log_records, memd_env, wait_for, wait_log

ENTRY = [sys.executable, "-X", "importtime", "-c", "from memd.__main__ import main; main()"]  # the `memd` script
# What a hook process the daemon answered loads, from memd's package on: nothing else.
CLIENT_MODULES = {"memd", "memd.__main__", "memd.agent", "memd.agent.hookwire", "_socket"}


@pytest.fixture
def world(tmp_path: Path) -> tuple[Home, Path]:
    home = Home(tmp_path / "h")
    proj = tmp_path / "shop"
    (proj / ".git").mkdir(parents=True)
    write_memory(home.global_memory, "prefers-tabs",
                 render_memory("prefers-tabs", "the user indents with tabs", "user", "Tabs, never spaces."))  # fmt: skip
    for name, desc, body in (("deploy-fridays", "deploys happen only on Fridays", "Run make deploy. Ünïcode ✓."),
                             ("db-choice", "Postgres, not MySQL", "Chosen for JSONB columns.")):  # fmt: skip
        write_memory(home.project_memory(project_key(proj)), name, render_memory(name, desc, "project", body))
    (home.root / "settings.json").write_text('{"memd": {"provider": "offline"}}')
    refresh_all(home)
    return home, proj


START = ("context", "SessionStart", {"source": "startup"})
PROMPT = ("recall", "UserPromptSubmit", {"prompt": "how do we deploy on fridays?"})


class Ran:
    def __init__(self, r: subprocess.CompletedProcess[bytes]) -> None:
        lines = r.stderr.decode().splitlines(keepends=True)
        names = [ln.rsplit("|", 1)[-1].strip() for ln in lines if ln.startswith("import time:")]
        self.code, self.out = r.returncode, r.stdout
        self.err = "".join(ln for ln in lines if not ln.startswith("import time:"))
        self.modules = set(names[names.index("memd") :]) if "memd" in names else set(names)

    @property
    def by_daemon(self) -> bool:
        return "memd.agent.hooks" not in self.modules

    @property
    def answer(self) -> tuple[int, bytes, str]:
        return self.code, self.out, self.err


def hook(home: Home | str, proj: Path, sid: str, which: tuple[str, str, dict[str, Any]], *, env: dict[str, str] | None = None,
         stdin: bytes | None = None) -> Ran:  # fmt: skip
    sub, name, extra = which
    root = home.root if isinstance(home, Home) else home
    data = event(home, proj, sid, name, **extra) if stdin is None and isinstance(home, Home) else stdin
    r = subprocess.run([*ENTRY, "--home", str(root), sub, "--hook"], input=data, capture_output=True,
                       env=env or memd_env(), cwd=proj, timeout=120)  # fmt: skip
    return Ran(r)


def itself(home: Home | str, proj: Path, sid: str, which: tuple[str, str, dict[str, Any]], **kw: Any) -> Ran:
    """The hook answering itself (what it printed before the socket)."""
    ran = hook(home, proj, sid, which, env=memd_env(MEMD_HOOK_SOCKET="off", **kw.pop("extra_env", {})), **kw)
    assert not ran.by_daemon
    return ran


def _rows(home: Home, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
    conn = state.connect(home.state_db)
    try:
        return list(conn.execute(sql, args))
    finally:
        conn.close()


def counts(home: Home, key: str) -> dict[str, int]:
    got = _rows(home, "SELECT v FROM kv WHERE k = ?", (key,))
    return json.loads(got[0][0]) if got else {}  # type: ignore[no-any-return]


def serving(home: Home) -> None:
    """The daemon serves hooks and its start-up index runs (the drawer and the project) are done: what the
    hooks read stays as it is while a test compares answers."""
    wait_log(home.root, event="hooks.serving")
    wait_for(lambda: sum(r.get("event") == "job.finished" and r.get("job") == "index" for r in log_records(home.root)) >= 2)


@pytest.fixture
def daemon(world: tuple[Home, Path]) -> Iterator[DaemonProc]:
    with DaemonProc(world[0].root) as d:
        serving(world[0])
        yield d


def test_the_daemon_answers_both_hooks_byte_for_byte_and_records_them_once(
    world: tuple[Home, Path], daemon: DaemonProc
) -> None:
    home, proj = world
    for i, which in enumerate((START, PROMPT, ("recall", "UserPromptSubmit", {"prompt": "nothing memory holds"}))):
        mine, theirs = itself(home, proj, f"a{i}", which), hook(home, proj, f"b{i}", which)
        assert theirs.by_daemon, theirs.err
        assert theirs.answer == mine.answer
        # the daemon records after the hook took its answer (`ctx.deferred`): wait for them, once
        wait_for(lambda i=i: counts(home, f"hooks:b{i}") == counts(home, f"hooks:a{i}"))
        assert theirs.out or which[2].get("prompt") == "nothing memory holds"
    assert wait_for(lambda: _day(home) == [(2, 4, 2)])  # once: the day's totals count each hook one time
    assert counts(home, "hooks:b2") == counts(home, "hooks:a2")


def _day(home: Home) -> list[tuple[int, int, int]]:
    days = [json.loads(v) for k, v in _kv(home) if k.startswith("hookday:")]
    return [(d["context"], d["prompts"], d["recalls"]) for d in days]


def _indexed(home: Home) -> int:
    from memd.index.search import open_readonly  # noqa: PLC0415 - this test's only

    conn = open_readonly(home.search_db)
    try:
        return int(conn.execute("SELECT count(*) FROM memories").fetchone()[0])
    finally:
        conn.close()


def test_with_many_matching_memories_and_the_index_changing_the_daemons_recall_is_the_processs(
    world: tuple[Home, Path], daemon: DaemonProc
) -> None:
    """The daemon keeps its database connections between answers (memd.agent.hooks.Kept) and counts and ranks
    the matches in scope only (memd.agent.candidates): after its first answer the index grows by memories that
    all share the prompt's words (most of them in more than half of the scope, ranks tied), and its next answer
    is still the one the process prints."""
    home, proj = world
    ask = ("recall", "UserPromptSubmit", {"prompt": "please fix the webhook in the deploy code and run the review"})
    assert hook(home, proj, "k1", ask).answer == itself(home, proj, "k2", ask).answer
    for i in range(24):  # 'deploy', 'code', 'run', 'review' in all: no evidence; 'webhook' in 8, tied in rank
        body = "Run the review of the deploy code." if i % 3 else "Deploy code: run it, review its webhook."
        write_memory(home.project_memory(project_key(proj)), f"deploy-note-{i:02d}",
                     render_memory(f"deploy-note-{i:02d}", "deploy code note", "project", body))  # fmt: skip
    wait_for(lambda: _indexed(home) == 27, timeout=60)  # the daemon's index run took them all
    mine, theirs = itself(home, proj, "k3", ask), hook(home, proj, "k4", ask)
    assert theirs.by_daemon and theirs.answer == mine.answer and b"deploy-note-" in theirs.out


def _kv(home: Home) -> list[tuple[str, str]]:
    return _rows(home, "SELECT k, v FROM kv")


def test_a_recall_once_per_session_and_a_malformed_event_as_the_process_says_them(
    world: tuple[Home, Path], daemon: DaemonProc
) -> None:
    home, proj = world
    first, again = hook(home, proj, "s", PROMPT), hook(home, proj, "s", PROMPT)
    assert first.by_daemon and again.by_daemon and b"deploy-fridays" in first.out
    assert again.answer == itself(home, proj, "s", PROMPT).answer  # the surfaced set the daemon wrote is the one read
    bad = hook(home, proj, "x", PROMPT, stdin=b'{"session_id": ')
    assert bad.by_daemon and bad.answer == itself(home, proj, "x", PROMPT, stdin=b'{"session_id": ').answer
    assert bad.code == 0 and bad.out == b"" and bad.err.startswith("memd: hook skipped: JSONDecodeError")


def test_a_hook_the_daemon_answers_loads_no_sqlite_no_settings_no_hook_module(
    world: tuple[Home, Path], daemon: DaemonProc
) -> None:
    home, proj = world
    for which in (START, PROMPT):
        ran = hook(home, proj, "m", which)
        assert ran.out and ran.modules <= CLIENT_MODULES, sorted(ran.modules - CLIENT_MODULES)


def connect_hook(home: Home, proj: Path, sid: str, which: tuple[str, str, dict[str, Any]], **extra_env: str) -> Ran:
    """The hook exactly as `memd connect` writes it into Claude Code's settings (memd.agent.connect.hook_command),
    run through the shell as Claude Code runs it; its imports listed by PYTHONPROFILEIMPORTTIME (from the
    interpreter's start: `-S` leaves `site` out, so nothing comes before memd's)."""
    from memd.agent.connect import hook_command  # noqa: PLC0415 - this test's only

    sub, name, extra = which
    r = subprocess.run(hook_command(home, sub), shell=True, input=event(home, proj, sid, name, **extra),
                       capture_output=True, env=memd_env(PYTHONPROFILEIMPORTTIME="1", **extra_env), cwd=proj,
                       timeout=120)  # fmt: skip
    ran = Ran(r)
    lines = r.stderr.decode().splitlines()
    ran.modules = {ln.rsplit("|", 1)[-1].strip() for ln in lines if ln.startswith("import time:")}
    return ran


def test_the_hook_connect_writes_leaves_site_out_when_the_daemon_answers_and_runs_it_when_not(
    world: tuple[Home, Path], daemon: DaemonProc
) -> None:
    """`-S`: a hook the daemon answers loads no `site` (the venv's configuration, .pth files) and answers as the
    `memd` entry does; one that answers itself runs `site` first and answers as the entry does too."""
    home, proj = world
    for which in (START, PROMPT):
        mine, theirs = itself(home, proj, "c1", which), connect_hook(home, proj, "c2", which)
        assert theirs.code == 0 and theirs.out, theirs.err
        assert "site" not in theirs.modules and "memd.agent.hooks" not in theirs.modules, sorted(theirs.modules)
        assert theirs.answer == mine.answer
        alone = connect_hook(home, proj, "c3", which, MEMD_HOOK_SOCKET="off")
        assert {"site", "memd.agent.hooks"} <= alone.modules, sorted(alone.modules)
        assert alone.answer == itself(home, proj, "c4", which).answer
    pre = connect_hook(home, proj, "c5", ("precompact", "PreCompact", {"trigger": "auto"}))
    assert pre.code == 0 and "site" in pre.modules, pre.err


def test_killed_mid_answer_the_hook_answers_itself_and_records_once(world: tuple[Home, Path]) -> None:
    home, proj = world
    want = itself(home, proj, "a", START)
    with DaemonProc(home.root, env=memd_env(MEMD_TEST_HOOK_PAUSE_S="600")) as d:
        serving(home)
        proc = subprocess.Popen([*ENTRY, "--home", str(home.root), "context", "--hook"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=memd_env(), cwd=proj)  # fmt: skip
        assert proc.stdin is not None
        proc.stdin.write(event(home, proj, "b", *START[1:2], **START[2]))
        proc.stdin.close()
        proc.stdin = None  # written whole: `communicate` only reads
        wait_log(home.root, event="hooks.paused")
        assert d.proc is not None
        d.proc.kill()
        d.proc.wait(60)
        out, err = proc.communicate(timeout=120)
    ran = Ran(subprocess.CompletedProcess([], proc.returncode, out, err))
    assert not ran.by_daemon and ran.answer == want.answer
    assert counts(home, "hooks:b") == counts(home, "hooks:a") == {**counts(home, "hooks:a"), "context": 1}
    stale = hook(home, proj, "c", START)  # the socket a killed daemon left: refused, answered in-process
    assert os.path.exists(home.memd_dir / "hook.sock") and not stale.by_daemon and stale.answer == want.answer


def test_a_daemon_too_busy_to_answer_costs_the_hook_its_short_wait_and_records_nothing_later(
    world: tuple[Home, Path],
) -> None:
    """The daemon takes the connection but reads it only after the hook's wait for the "ok" is over (as a
    stopped or swamped daemon would): the hook answers itself, and the daemon then drops the request."""
    home, proj = world
    want = itself(home, proj, "a", PROMPT)
    with DaemonProc(home.root, env=memd_env(MEMD_TEST_HOOK_STALL_S="1", MEMD_TEST_HOOK_SLACK_S="0")) as d:
        serving(home)
        ran = hook(home, proj, "b", PROMPT, env=memd_env(MEMD_TEST_HOOK_SLACK_S="0"))
        assert not ran.by_daemon and ran.answer == want.answer
        wait_log(home.root, event="hooks.late", sub="recall")  # read after the hook gave up: dropped
        assert counts(home, "hooks:b") == counts(home, "hooks:a") == {**counts(home, "hooks:a"), "prompts": 1}
        d.stop()


def test_another_environment_or_version_is_left_to_the_hook(world: tuple[Home, Path], daemon: DaemonProc) -> None:
    home, proj = world
    # another zone: the local date in the answer is the hook's, so the daemon says no and the hook answers itself
    zone = {"TZ": "Pacific/Kiritimati" if os.environ.get("TZ") != "Pacific/Kiritimati" else "Etc/GMT+12"}
    ran = hook(home, proj, "z", START, env=memd_env(**zone))
    assert not ran.by_daemon and ran.answer == itself(home, proj, "z2", START, extra_env=zone).answer
    # another protocol or code stamp: "no", at once
    for proto, stamp in ((hookwire.PROTOCOL + 1, hookwire.code_stamp()), (hookwire.PROTOCOL, b"0.0.0/1/1")):
        request = hookwire.encode_request("context", str(home.root), event(home, proj, "v", *START[1:2], **START[2]),
                                          cwd=str(proj), pid=os.getpid(), sent=_now(), streams=("utf-8",) * 2 + ("utf-8",) * 2,
                                          env=hookwire.wanted_env(memd_env()), stamp=stamp)  # fmt: skip
        request = request.replace(b"\0%d\0" % hookwire.PROTOCOL, b"\0%d\0" % proto, 1)
        assert _ask_raw(home, request).startswith(b"no another version of memd")
    assert counts(home, "hooks:v") == {}


def _now() -> float:
    import time  # noqa: PLC0415

    return time.monotonic()


def _ask_raw(home: Home, request: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(60)
        s.connect(str(home.memd_dir / hookwire.SOCKET_NAME))
        s.sendall(request)
        return s.recv(4096)


def test_a_home_by_another_path_is_answered_with_that_path_a_linked_socket_is_not_used(
    world: tuple[Home, Path], daemon: DaemonProc, tmp_path: Path
) -> None:
    home, proj = world
    (tmp_path / "alias").symlink_to(home.root)
    alias = str(tmp_path / "alias")
    ran = hook(alias, proj, "l", START, stdin=event(home, proj, "l", *START[1:2], **START[2]))
    mine = itself(alias, proj, "l2", START, stdin=event(home, proj, "l2", *START[1:2], **START[2]))
    assert ran.by_daemon and ran.answer == mine.answer
    other = Home(tmp_path / "other")
    other.memd_dir.mkdir(parents=True, mode=0o700)
    (other.memd_dir / hookwire.SOCKET_NAME).symlink_to(home.memd_dir / hookwire.SOCKET_NAME)
    linked = hook(str(other.root), proj, "o", START, stdin=event(other, proj, "o", *START[1:2], **START[2]))
    assert not linked.by_daemon and linked.code == 0  # never connected through the link: answered for its own home
    assert counts(home, "hooks:o") == {}


@pytest.mark.slow  # the daemon loads the SDK: ~5 s here
def test_a_recall_with_a_model_is_answered_by_the_daemon_within_the_budget(world: tuple[Home, Path]) -> None:
    """The anthropic provider in the daemon, chosen while it runs (a reload loads the SDK): the model's pick, the
    call recorded once; a hook with another key in its environment makes its own call."""
    home, proj = world
    with FakeAnthropic() as api:
        api.default = json_text({"selected": [1]})
        env = memd_env(ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="sk-ant-test")
        with DaemonProc(home.root, env=env) as d:
            serving(home)
            # a budget no loaded machine runs out of: the call is made and answered whatever the load
            (home.root / "settings.json").write_text('{"memd": {"provider": "anthropic", "recallBudgetMs": 20000}}')
            assert d.proc is not None
            d.proc.send_signal(signal.SIGHUP)
            wait_log(home.root, event="hooks.model_ready")
            ran = hook(home, proj, "m", PROMPT, env=env)
            assert ran.by_daemon and b"deploy-fridays" in ran.out, ran.err
            assert len(api.requests) == 1
            calls = [tuple(c) for c in wait_for(lambda: _calls(home))]
            assert calls == [("recall", 1)]
            elsewhere = hook(home, proj, "n", PROMPT, env={**env, "ANTHROPIC_API_KEY": "sk-ant-other"})
            assert not elsewhere.by_daemon and b"deploy-fridays" in elsewhere.out  # another key: its own call


def _calls(home: Home) -> list[tuple[str, int]]:
    return _rows(home, "SELECT job, ok FROM model_calls")


def test_the_wire_carries_a_request_whole() -> None:
    env = {"HOME": "/home/u", "ANTHROPIC_BASE_URL": "http://x", "TZ": "UTC"}
    raw = "ünï\0\n".encode() + bytes(range(256))
    request = hookwire.encode_request("recall", "~/h", raw, cwd="/w d\n", pid=42, sent=12.5,
                                      streams=("utf-8", "strict", "ascii", "backslashreplace"), env=env, stamp=b"s")  # fmt: skip
    a, b = socket.socketpair()
    with a, b:
        a.sendall(request)
        req = read_request(b)
    assert (req.sub, req.home, req.cwd, req.pid, req.sent, req.stdin, req.env) == ("recall", "~/h", "/w d\n", 42, 12.5, raw, env)
    assert req.streams == ("utf-8", "strict", "ascii", "backslashreplace") and req.stamp == b"s"


def test_what_the_client_takes_from_the_environment_and_the_answer_line() -> None:
    assert hookwire.wanted_env({"HOME": "/h", "ANTHROPIC_API_KEY": "k", "CLAUDECODE": "1", "LANG": "C"}) == {
        "HOME": "/h", "ANTHROPIC_API_KEY": "k"}  # fmt: skip
    assert hookwire.decode_answer(b"0 12 3") == (0, 12, 3)
    assert hookwire.decode_answer(b"0 12") is None and hookwire.decode_answer(b"-1 0 0") is None
    assert hookwire.decode_answer(b"0 %d 0" % (hookwire.MAX_ANSWER + 1)) is None
    assert hookwire.MAX_STDIN == hooks.MAX_STDIN


def test_only_a_socket_of_this_user_in_a_private_directory_is_used(tmp_path: Path) -> None:
    d = tmp_path / "memd"
    d.mkdir(mode=0o700)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(d / "hook.sock"))
        assert hookwire.usable(str(d / "hook.sock"))
        os.chmod(d, 0o777)
        assert not hookwire.usable(str(d / "hook.sock"))  # others could put anything there
        os.chmod(d, 0o700)
        (d / "link.sock").symlink_to(d / "hook.sock")
        assert not hookwire.usable(str(d / "link.sock"))
    (tmp_path / "linked").symlink_to(d)
    assert not hookwire.usable(str(tmp_path / "linked" / "hook.sock"))
    assert not hookwire.usable(str(tmp_path / "absent" / "hook.sock"))


def test_the_daemon_resolves_a_hooks_home_from_the_hooks_cwd_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memd.tree import resolve_home  # noqa: PLC0415

    assert resolve_home("rel/h", environ={}, cwd="/w") == Path("/w/rel/h")
    assert resolve_home(None, environ={"DEEPCODE_HOME": "/d"}, cwd="/w") == Path("/d")
    assert resolve_home(None, environ={}, cwd="/w") == Path("~/.deepcode").expanduser()
    monkeypatch.chdir(tmp_path)
    assert resolve_home("rel") == resolve_home("rel", cwd=str(tmp_path)) == tmp_path / "rel"  # as the process itself


def test_an_answer_the_hook_gave_up_on_records_nothing_and_the_hook_recalls_itself(
    world: tuple[Home, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reviewer's case: the daemon's work finished after the hook stopped waiting. Before, `respond` had
    written the session's counts and recall's surfaced set, so the hook's own recall then surfaced nothing
    (the memory counted as shown) and the prompt was counted twice. Now the daemon writes a hook's records
    only once the hook took the answer (`hookwire.TAKEN`)."""
    import time  # noqa: PLC0415

    import structlog  # noqa: PLC0415

    from memd.daemon import hook_server  # noqa: PLC0415

    home, proj = world
    real = hooks.respond

    def stalled(*args: Any, **kw: Any) -> hooks.Reply:
        reply = real(*args, **kw)
        time.sleep(hook_server.ANSWER_WAIT_S + 0.5)  # the daemon stalls (load, the GIL) past the hook's wait
        return reply

    monkeypatch.setattr(hooks, "respond", stalled)
    env = memd_env(MEMD_TEST_HOOK_SLACK_S="0")  # the waits as users have them: the stall outlasts them
    env.pop(hookwire.OFF_ENV, None)
    server = hook_server.HookServer(home, structlog.get_logger("test"), environ=env)
    server.start()
    try:
        wait_for(lambda: hookwire.usable(str(home.memd_dir / hookwire.SOCKET_NAME)))
        sub, name, extra = PROMPT
        r = subprocess.run([*ENTRY, "--home", str(home.root), sub, "--hook"], input=event(home, proj, "s1", name, **extra),
                           capture_output=True, env=env, cwd=proj, timeout=120)  # fmt: skip
    finally:
        server.stop()
    assert r.returncode == 0 and b"deploy-fridays" in r.stdout  # the hook's own recall surfaced the memory
    assert counts(home, "hooks:s1")["prompts"] == 1  # counted once: by the hook, not also by the late daemon
    assert counts(home, "hooks:s1")["recalls"] == 1
