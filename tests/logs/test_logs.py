"""Logs: JSON lines from structlog and stdlib alike, redaction, rotation, reading and following."""

from __future__ import annotations

import io
import json
import logging
import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as hst

import memd
from memd.logs import events as logs
from memd.logs import read as logread
from memd.logs.file import private_rotating_handler
from memd.tree import Home

REPO = Path(memd.__file__).resolve().parent.parent


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path / "deepcode")


@pytest.fixture(autouse=True)
def _detach_handlers():
    yield
    logs.shutdown()


def _lines(home: Home) -> list[dict]:
    return [json.loads(line) for line in home.log_file.read_text().splitlines()]


def test_events_are_json_lines_with_the_fixed_fields(home: Home) -> None:
    logs.configure(home, stderr=False)
    logs.get_logger("memd.jobs").info("job.finished", job="dream", target="k", duration_ms=12)
    [rec] = _lines(home)
    assert rec["event"] == "job.finished" and rec["level"] == "info" and rec["logger"] == "memd.jobs"
    assert rec["job"] == "dream" and rec["target"] == "k" and rec["duration_ms"] == 12
    ts = datetime.fromisoformat(rec["ts"].replace("Z", "+00:00"))
    assert ts.utcoffset() == timedelta(0)
    assert abs(datetime.now(UTC) - ts) < timedelta(minutes=1)
    assert list(rec)[:4] == ["ts", "level", "event", "logger"]


def test_file_and_dir_are_private(home: Home) -> None:
    old = os.umask(0)
    try:
        logs.configure(home, stderr=False)
        logs.get_logger().info("daemon.started")
    finally:
        os.umask(old)
    assert stat.S_IMODE(home.logs_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(home.log_file.stat().st_mode) == 0o600


def test_stdlib_loggers_such_as_apscheduler_become_json_lines(home: Home) -> None:
    logs.configure(home, stderr=False)
    logging.getLogger("apscheduler.scheduler").info("Added job %r to job store %r", "dream:k", "default")
    logging.getLogger("apscheduler.scheduler").debug("below the level: dropped")
    [rec] = _lines(home)
    assert rec["logger"] == "apscheduler.scheduler"
    assert rec["level"] == "info"
    assert rec["event"] == "Added job 'dream:k' to job store 'default'"
    assert rec["ts"].endswith("Z")


def test_exceptions_become_a_string_field(home: Home) -> None:
    logs.configure(home, stderr=False)
    log = logs.get_logger("memd.daemon")
    try:
        _ = 1 / 0
    except ZeroDivisionError:
        log.exception("job.crashed", job="index")
    try:
        raise KeyError("boom")
    except KeyError:
        logging.getLogger("apscheduler.executors.default").exception("Job raised")
    first, second = _lines(home)
    assert first["level"] == "error" and "ZeroDivisionError" in first["exception"]
    assert "Traceback" in first["exception"]
    assert second["logger"] == "apscheduler.executors.default" and "KeyError: 'boom'" in second["exception"]


def test_prompts_messages_and_keys_are_redacted(home: Home) -> None:
    logs.configure(home, stderr=False)
    logs.get_logger("memd.llm").info(
        "model.called",
        prompt="the user's whole transcript",
        system="you are a memory extractor",
        messages=[{"role": "user", "content": "secret"}],
        api_key="sk-ant-api03-abcdefghijklmnop",
        Authorization="Bearer abc.def.ghi",
        request={"headers": {"x-api-key": "sk-ant-zzzzzzzzzzzz"}, "model": "claude"},
        prompt_tokens=1200,
        input_tokens=1200,
        model="claude-haiku",
    )
    try:
        raise RuntimeError("401 for key sk-ant-api03-leakyleakyleaky")
    except RuntimeError:
        logging.getLogger("anthropic").exception("request failed with Bearer abcdefghijklmnopq")
    raw = home.log_file.read_text()
    for secret in ("transcript", "memory extractor", "secret", "sk-ant", "abc.def.ghi", "leaky", "abcdefghijklmnopq"):
        assert secret not in raw, secret
    rec, err = _lines(home)
    for key in ("prompt", "system", "messages", "api_key", "Authorization"):
        assert rec[key] == logs.REDACTED
    assert rec["request"]["headers"]["x-api-key"] == logs.REDACTED
    assert rec["request"]["model"] == "claude"
    assert rec["prompt_tokens"] == 1200 and rec["input_tokens"] == 1200  # counts are kept
    assert "RuntimeError" in err["exception"]


def test_secrets_in_free_text_are_redacted_at_any_depth(home: Home) -> None:
    """A key echoed in an error body, a password in a reason, a token in a nested field or a list:
    every string of the event goes through memd.redact.redactor's rules before the line is written."""
    key = "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"
    npm = "npm_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    hook = "T0ABCDEFG/B0ABCDEFGHI/" + "AbCdEfGhIjKlMnOpQrStUvWx"
    logs.configure(home, stderr=False)
    log = logs.get_logger("memd.llm")
    log.warning(
        "model.failed",
        error=f'400 {{"error": {{"message": "API key not valid: {key}"}}}}',
        reason="gate answer unclear: 'sure, run mysql -u root -pS3cr3tPw! shop'",
        request={"url": "https://ci.example.com/hook?access_token=Zx81Kq0PlmN4", "body": [f"token {npm}", 3]},
        target=f"https://hooks.slack.com/services/{hook}",
        attempt=2,
        model="claude-haiku",
    )
    try:
        raise RuntimeError(f"upstream said: DATABASE_URL=postgres://app:Hunter22x@db/app and {npm}")
    except RuntimeError:
        log.exception("job.crashed", job="extract")
    raw = home.log_file.read_text()
    for secret in (key, npm, "S3cr3tPw!", "Zx81Kq0PlmN4", hook, "Hunter22x"):
        assert secret not in raw, secret
    rec, crash = _lines(home)
    assert rec["error"] == '400 {"error": {"message": "API key not valid: [REDACTED:google-api-key]"}}'
    assert rec["reason"] == "gate answer unclear: 'sure, run mysql -u root -p[REDACTED:cli-password] shop'"
    assert rec["request"]["url"] == "https://ci.example.com/hook?access_token=[REDACTED:url-token]"
    assert rec["request"]["body"] == ["token [REDACTED:npm]", 3]
    assert rec["target"] == "https://hooks.slack.com/services/[REDACTED:slack-webhook]"
    assert rec["attempt"] == 2 and rec["model"] == "claude-haiku"  # the rest is untouched
    assert "RuntimeError" in crash["exception"] and "[REDACTED:url-password]" in crash["exception"]


def test_secret_redaction_leaves_ordinary_events_alone(home: Home) -> None:
    logs.configure(home, stderr=False)
    fields = {"job": "dream", "path": "/home/alice/.claude/projects/-home-alice-api/3f2a1b4c.jsonl",
              "session": "4d5611e5-241a-462a-8d15-5122611a9569", "sha": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b",
              "answer": "yes", "tokens": 1200, "ok": True, "ratio": 0.5, "none": None}
    logs.get_logger().info("job.finished", **fields)
    [rec] = _lines(home)
    assert {k: rec[k] for k in fields} == fields


def test_redact_secrets_processor_is_pure_and_cheap() -> None:
    """Strings that cannot hold a secret skip the rules; other values pass through."""
    event = {"event": "tick", "n": 3, "nested": {"deep": ["a", {"x": "DB_PASSWORD=hunter22"}]}, "obj": Path("/tmp/x")}
    out = logs.redact_secrets(None, "info", dict(event))
    assert out["event"] == "tick" and out["n"] == 3 and out["obj"] == "/tmp/x"
    assert out["nested"] == {"deep": ["a", {"x": "DB_PASSWORD=[REDACTED:env-assignment]"}]}
    started = time.process_time()  # CPU time: a loaded machine stretches wall time, not the work done here
    for _ in range(2000):
        logs.redact_secrets(None, "info", {"event": "job.finished", "job": "dream", "target": "k", "duration_ms": 12})
    assert time.process_time() - started < 1.0  # well under a millisecond an event


def test_configure_is_idempotent(home: Home) -> None:
    for _ in range(3):
        logs.configure(home, stderr=True, stream=io.StringIO())
    root = logging.getLogger()
    own = [h for h in root.handlers if getattr(h, "_memd_handler", False)]
    assert len(own) == 2
    logs.get_logger().info("once")
    assert [r["event"] for r in _lines(home)] == ["once"]


def test_configure_leaves_foreign_handlers_alone(home: Home) -> None:
    foreign = logging.NullHandler()
    logging.getLogger().addHandler(foreign)
    try:
        logs.configure(home, stderr=False)
        logs.configure(home, stderr=False)
        assert foreign in logging.getLogger().handlers
    finally:
        logging.getLogger().removeHandler(foreign)


def test_stderr_is_json_when_not_a_tty_and_console_when_asked(home: Home) -> None:
    out = io.StringIO()  # not a TTY, like journald or launchd
    logs.configure(home, file=False, stream=out)
    logs.get_logger("memd").info("daemon.started", pid=1)
    rec = json.loads(out.getvalue())
    assert rec["event"] == "daemon.started" and rec["pid"] == 1
    assert not home.log_file.exists()

    out = io.StringIO()
    logs.configure(home, file=False, stream=out, json_stderr=False)
    logs.get_logger("memd").info("daemon.started", pid=1, api_key="sk-ant-hidden-hidden")
    text = out.getvalue()
    assert "daemon.started" in text and "pid" in text and not text.startswith("{")
    assert "hidden" not in text


def test_stderr_level_keeps_the_stderr_copy_small(home: Home, monkeypatch) -> None:
    monkeypatch.setenv(logs.STDERR_LEVEL_ENV, "warning")
    out = io.StringIO()
    logs.configure(home, stream=out)
    log = logs.get_logger()
    log.info("job.finished")
    log.warning("lock.busy")
    assert [json.loads(line)["event"] for line in out.getvalue().splitlines()] == ["lock.busy"]
    assert [r["event"] for r in _lines(home)] == ["job.finished", "lock.busy"]


def test_rejects_an_unknown_level(home: Home) -> None:
    with pytest.raises(ValueError):
        logs.configure(home, level="verbose")


def test_rotation_keeps_a_bounded_number_of_private_files(home: Home) -> None:
    logs.configure(home, stderr=False, max_bytes=2000, backups=3)
    log = logs.get_logger("memd.test")
    for i in range(300):
        log.info("tick.logged", seq=i, pad="x" * 40)
    files = logread.log_files(home)
    assert [p.name for p in files] == ["memd.jsonl.3", "memd.jsonl.2", "memd.jsonl.1", "memd.jsonl"]
    for p in files:
        assert p.stat().st_size <= 2000
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
    seqs = [r["seq"] for r in logread.read_log(home)]
    assert seqs == sorted(seqs) and seqs[-1] == 299  # oldest first, newest last
    assert len(seqs) < 300  # the oldest were rotated away


def test_a_second_writer_that_rotated_is_followed_not_rotated_again(home: Home) -> None:
    """The daemon and `memd run-now` share the file; after the other rotates, we reopen."""
    logs.configure(home, stderr=False, max_bytes=10_000_000)
    log = logs.get_logger()
    log.info("before")
    os.rename(home.log_file, home.logs_dir / "memd.jsonl.1")  # what the other process's rollover does
    log.info("after")
    assert [r["event"] for r in _lines(home)] == ["after"]
    assert [r["event"] for r in logread.read_log(home)] == ["before", "after"]


def _write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))


def _rec(ts: str, level: str, event: str, **kw: object) -> str:
    return json.dumps({"ts": ts, "level": level, "event": event, **kw})


def test_read_log_filters_and_skips_malformed_lines(home: Home) -> None:
    _write(home.logs_dir / "memd.jsonl.1", [
        _rec("2025-01-01T10:00:00Z", "info", "job.finished", job="dream"),
        "{not json",
        _rec("2025-01-01T11:00:00Z", "error", "job.failed", job="extract"),
    ])
    _write(home.log_file, [
        "[1, 2, 3]",
        "",
        _rec("2025-01-02T10:00:00.500000Z", "warning", "lock.busy", job="dream"),
        _rec("2025-01-02T11:00:00+00:00", "info", "job.finished", job="dream"),
        '{"ts": "2025-01-02T12:00:00Z", "level": "info", "event": "half a li',
    ])
    events = lambda **kw: [r["event"] for r in logread.read_log(home, **kw)]  # noqa: E731
    assert events() == ["job.finished", "job.failed", "lock.busy", "job.finished"]
    assert events(job="dream") == ["job.finished", "lock.busy", "job.finished"]
    assert events(level="warning") == ["job.failed", "lock.busy"]
    assert events(since=datetime(2025, 1, 2, tzinfo=UTC)) == ["lock.busy", "job.finished"]
    assert events(since=datetime(2025, 1, 2, 10, 30)) == ["job.finished"]  # naive = UTC
    assert events(job="dream", level="warning", since=datetime(2025, 1, 1, 12)) == ["lock.busy"]


def test_read_log_of_a_home_without_logs_is_empty(home: Home) -> None:
    assert list(logread.read_log(home)) == []


def _driver(steps: list[Callable[[], None]]):
    """A `sleep` that performs the next scripted change instead of sleeping, and a `should_stop`."""
    def sleep(_s: float) -> None:
        steps.pop(0)()

    return sleep, (lambda: not steps)


def _append(path: Path, *lines: str) -> Callable[[], None]:
    def do() -> None:
        with open(path, "a") as fh:
            fh.write("".join(lines))
    return do


def test_follow_log_survives_rotation_and_waits_for_whole_lines(home: Home) -> None:
    _write(home.log_file, [_rec("2025-01-01T00:00:00Z", "info", "old")])
    rotated = home.logs_dir / "memd.jsonl.1"
    steps = [
        _append(home.log_file, _rec("2025-01-01T00:00:01Z", "info", "a") + "\n", '{"ts": "2025-01-01T00:00:02Z", '),
        _append(home.log_file, '"level": "info", "event": "b"}\n'),
        _append(home.log_file, _rec("2025-01-01T00:00:03Z", "info", "c") + "\n"),
        lambda: os.rename(home.log_file, rotated),
        _append(rotated, _rec("2025-01-01T00:00:04Z", "info", "d-late-in-old-file") + "\n"),
        _append(home.log_file, _rec("2025-01-01T00:00:05Z", "error", "e-new-file") + "\n"),
        lambda: None,
    ]
    sleep, stop = _driver(steps)
    got = [r["event"] for r in logread.follow_log(home, sleep=sleep, should_stop=stop, poll_interval=0)]
    assert got == ["a", "b", "c", "d-late-in-old-file", "e-new-file"]


def test_follow_log_from_start_filters_and_handles_truncation(home: Home) -> None:
    _write(home.logs_dir / "memd.jsonl.1", [_rec("2025-01-01T00:00:00Z", "error", "r1", job="dream")])
    _write(home.log_file, [_rec("2025-01-01T00:00:01Z", "error", "c1", job="index"),
                           _rec("2025-01-01T00:00:02Z", "error", "c2", job="dream")])
    steps = [
        lambda: home.log_file.write_text(""),  # truncated in place (copytruncate rotation)
        _append(home.log_file, _rec("2025-01-01T00:00:03Z", "error", "t1", job="dream") + "\n"),
        lambda: None,
    ]
    sleep, stop = _driver(steps)
    got = [r["event"] for r in logread.follow_log(home, job="dream", from_start=True, sleep=sleep,
                                               should_stop=stop, poll_interval=0)]
    assert got == ["r1", "c2", "t1"]


def test_follow_log_waits_for_a_log_that_does_not_exist_yet(home: Home) -> None:
    steps = [
        lambda: _write(home.log_file, [_rec("2025-01-01T00:00:00Z", "info", "first")]),
        lambda: None,
    ]
    sleep, stop = _driver(steps)
    assert [r["event"] for r in logread.follow_log(home, sleep=sleep, should_stop=stop)] == ["first"]


def test_importing_logs_and_locks_stays_cheap() -> None:
    """`memd status` imports these; structlog, filelock and apscheduler load only when used."""
    code = (
        "import sys, memd.logs.events, memd.locks, memd.daemon.lock;"
        "heavy = [m for m in ('structlog', 'apscheduler', 'filelock', 'logging.handlers', 'memd.redact.redactor')"
        " if m in sys.modules];"
        "print(heavy)"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_a_record_is_formatted_once_for_the_log_file(tmp_path: Path) -> None:
    """The rotating handler sizes a record by formatting it (`should_roll_over`) and `emit` formats it
    again: the whole pipeline, redaction included, twice a line (issue 27: 21 index runs' lines).
    Once now, and the line on disk is that one."""
    calls: list[str] = []

    class Counting(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            calls.append(record.getMessage())
            return super().format(record)

    handler = private_rotating_handler(tmp_path / "memd.jsonl", 1_000_000, 2)
    handler.setFormatter(Counting("%(message)s"))
    try:
        for text in ("first", "second"):
            handler.handle(logging.LogRecord("memd.test", logging.INFO, __file__, 1, text, None, None))
    finally:
        handler.close()
    assert calls == ["first", "second"]
    assert (tmp_path / "memd.jsonl").read_text() == "first\nsecond\n"


def test_a_short_string_seen_again_is_redacted_again() -> None:
    """Short strings' answers are kept (`_redact_text`): the second event with the same secret is
    redacted as the first, and a long string is never kept."""
    short = "run mysql -u root -pS3cr3tPw! shop"
    long = short + " " + "x" * 300
    for _ in range(2):
        out = logs.redact_secrets(None, "info", {"event": "x", "reason": short, "detail": long, "target": "project:-p000"})
        assert "S3cr3tPw!" not in out["reason"] and "S3cr3tPw!" not in out["detail"]
        assert out["target"] == "project:-p000"


_HALF_IMPORTED = r"""
import importlib.abc, importlib.util, sys, threading
started, go = threading.Event(), threading.Event()

class Slow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "structlog":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module
        def exec_module(module):  # in sys.modules already, its functions not yet defined
            started.set()
            go.wait(30)
            run(module)
        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, Slow())
from memd.logs.lazy import import_structlog
got = {}
a = threading.Thread(target=lambda: import_structlog())
a.start()
started.wait(30)
b = threading.Thread(target=lambda: got.setdefault("b", hasattr(import_structlog(), "configure")))
b.start()
b.join(0.5)  # on main b returned at once with the half-imported module
go.set()
a.join(); b.join()
print(got["b"])
"""


def test_a_thread_asking_for_structlog_while_another_imports_it_gets_the_whole_module() -> None:
    """200 parallel `remember` calls of one `memd mcp` failed with "partially initialized module
    'structlog' has no attribute 'configure'": `import_structlog` handed out `sys.modules`' entry
    while another thread was still running structlog's module body."""
    r = subprocess.run([sys.executable, "-c", _HALF_IMPORTED], capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True"


@pytest.mark.parametrize("backups", [0, 1, 3])
def test_the_rotation_is_the_standard_librarys(tmp_path: Path, backups: int) -> None:
    """memd's handler rotates as `logging.handlers.RotatingFileHandler` does (it is written on
    `logging.FileHandler` to keep logging.handlers' imports out of every command): the same lines into
    the same sizes give the same files, byte for byte."""
    from logging.handlers import RotatingFileHandler  # noqa: PLC0415 - the reference, here only

    ours_dir, theirs_dir = tmp_path / "ours", tmp_path / "theirs"
    ours_dir.mkdir()
    theirs_dir.mkdir()
    ours = private_rotating_handler(ours_dir / "memd.jsonl", 700, backups)
    theirs = RotatingFileHandler(theirs_dir / "memd.jsonl", maxBytes=700, backupCount=backups, encoding="utf-8")
    try:
        for handler in (ours, theirs):
            handler.setFormatter(logging.Formatter("%(message)s"))
            for i in range(120):
                handler.handle(logging.LogRecord("memd.test", logging.INFO, __file__, 1, f"line {i} " + "é" * (i % 37),
                                                 None, None))  # fmt: skip
    finally:
        ours.close()
        theirs.close()
    got = {p.name: p.read_bytes() for p in ours_dir.iterdir()}
    assert got == {p.name: p.read_bytes() for p in theirs_dir.iterdir()}
    assert len(got) == backups + 1


@given(hst.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(9999, 12, 30)))
def test_a_time_stamp_passes_unread_and_the_rules_agree(when: datetime) -> None:
    """`stamp`'s form is kept as it is without the rules (`_redact_text`): sound only because no rule can
    find anything in digits and its marks, which the rules themselves say for every such stamp."""
    from memd.redact.redactor import find_secrets, may_hold_secret  # noqa: PLC0415

    ts = logs.stamp(None, "info", {"_record": _record_at(when.replace(tzinfo=UTC).timestamp())})["ts"]
    assert logs._STAMP.fullmatch(ts) and logs._redact_text(ts) == ts
    assert not may_hold_secret(ts) and find_secrets(ts) == []


def _record_at(created: float) -> logging.LogRecord:
    record = logging.LogRecord("memd.test", logging.INFO, __file__, 1, "x", None, None)
    record.created = created
    return record


def test_a_reopen_refused_once_is_tried_again_at_the_next_line(tmp_path: Path) -> None:
    """The file was moved and a symlink put in its place: that line is lost (said on stderr), and once a
    regular file is back the next lines land in it (found in review: the closed stream stayed, and every
    later line failed)."""
    path = tmp_path / "memd.jsonl"
    handler = private_rotating_handler(path, 10_000_000, 2)
    handler.setFormatter(logging.Formatter("%(message)s"))
    errors = io.StringIO()
    old_stderr, old_raise = sys.stderr, logging.raiseExceptions
    sys.stderr, logging.raiseExceptions = errors, True
    try:
        for text in ("one", "two"):
            if text == "two":
                path.rename(tmp_path / "moved")
                (tmp_path / "other").write_text("")
                path.symlink_to(tmp_path / "other")
            handler.handle(logging.LogRecord("memd.test", logging.INFO, __file__, 1, text, None, None))
        path.unlink()
        path.write_text("")
        for text in ("three", "four"):
            handler.handle(logging.LogRecord("memd.test", logging.INFO, __file__, 1, text, None, None))
    finally:
        sys.stderr, logging.raiseExceptions = old_stderr, old_raise
        handler.close()
    assert path.read_text() == "three\nfour\n" and (tmp_path / "moved").read_text() == "one\n"
    assert (tmp_path / "other").read_text() == "" and "not a regular file" in errors.getvalue()
