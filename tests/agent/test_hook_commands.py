"""The hook commands as Claude Code runs them: JSON on stdin, one JSON answer (or nothing) on stdout.

Events are shaped like Claude Code 2.1's (`session_id`, `transcript_path`, `cwd`,
`hook_event_name`, and `source` / `prompt` / `trigger`). Offline provider (no API
key in the environment), real processes, a real home.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from memd import state
from memd.agent.candidates import content_terms, telling_terms
from memd.agent.connect import hook_command
from memd.agent.hooks import summarise_now, take_summary_requests
from memd.index.refresh import refresh_all
from memd.keys import cwd_key, project_key
from memd.memory.file import render_memory, write_memory
from memd.tree import Home
from tests.conftest import memd_cmd
from tests.procs import DaemonProc, memd_env, wait_for, wait_log

DAY = 86_400
SID = "5f0c1d2e-3a4b-4c5d-8e9f-0a1b2c3d4e5f"


@pytest.fixture
def world(tmp_path: Path) -> tuple[Home, Path]:
    home = Home(tmp_path / "claude")
    proj = tmp_path / "shop"
    (proj / ".git").mkdir(parents=True)
    key = project_key(proj)
    write_memory(home.global_memory, "prefers-tabs",
                 render_memory("prefers-tabs", "the user indents with tabs", "user", "Tabs, never spaces."))  # fmt: skip
    for name, desc, body, age in (
        ("deploy-fridays", "deploys happen only on Fridays", "Run make deploy on Fridays; never on Mondays.", 3 * DAY),
        ("db-choice", "Postgres, not MySQL", "Chosen for JSONB columns.", 60),
        ("kube-cluster", "production runs on a Kubernetes cluster", "Deploy with kubectl apply.", 2 * DAY),
    ):
        p = write_memory(home.project_memory(key), name, render_memory(name, desc, "project", body))
        os.utime(p, (time.time() - age, time.time() - age))
    refresh_all(home)
    return home, proj


def event(proj: Path, home: Home, name: str, sid: str = SID, **extra: Any) -> dict[str, Any]:
    transcript = home.projects / cwd_key(proj) / f"{sid}.jsonl"
    return {"session_id": sid, "transcript_path": str(transcript), "cwd": str(proj), "hook_event_name": name,
            "permission_mode": "default", **extra}  # fmt: skip


def hook(home: Home, *args: str, stdin: str | bytes, cwd: Path | None = None) -> tuple[int, str, str]:
    data = stdin if isinstance(stdin, bytes) else stdin.encode()
    r = subprocess.run([*memd_cmd(), "--home", str(home.root), *args], input=data, capture_output=True,
                       env=memd_env(), cwd=cwd, timeout=60)  # fmt: skip
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def context_of(out: str, event_name: str) -> str:
    answer = json.loads(out)
    assert set(answer) == {"hookSpecificOutput"}
    spec = answer["hookSpecificOutput"]
    assert spec["hookEventName"] == event_name and set(spec) == {"hookEventName", "additionalContext"}
    return str(spec["additionalContext"])


@pytest.mark.parametrize("source", ["startup", "resume", "clear", "compact"])
def test_session_start_answers_with_the_drawer_the_rule_and_the_date(world: tuple[Home, Path], source: str) -> None:
    home, proj = world
    rc, out, err = hook(home, "context", "--hook", stdin=json.dumps(event(proj, home, "SessionStart", source=source)))
    assert rc == 0, err
    text = context_of(out, "SessionStart")
    assert "Tabs, never spaces." in text and "point-in-time observations" in text
    assert f"Today's date is {time.strftime('%Y-%m-%d')}" in text
    assert "deploys happen only on Fridays" not in text  # MEMORY.md: Claude Code loads it itself
    assert len(text) <= 9_500


def test_prompt_recall_with_age_never_twice_and_nothing_unrelated(world: tuple[Home, Path]) -> None:
    home, proj = world
    start = event(proj, home, "SessionStart", source="startup")
    assert hook(home, "context", "--hook", stdin=json.dumps(start))[0] == 0

    def ask(prompt: str) -> str:
        rc, out, err = hook(home, "recall", "--hook", stdin=json.dumps(event(proj, home, "UserPromptSubmit", prompt=prompt)))
        assert rc == 0 and "Traceback" not in err, err
        return out

    first = context_of(ask("How do we deploy the shop?"), "UserPromptSubmit")
    assert "deploy-fridays" in first and "3 days old" in first and "This memory is 3 days old." in first
    assert "Run make deploy on Fridays" in first and str(home.project_memory(project_key(proj))) in first
    assert "kube-cluster" in first and "2 days old" in first
    assert "db-choice" not in first  # shares no telling word with the prompt
    assert "prefers-tabs" not in first
    again = ask("and deploy again, how?")
    assert again == ""  # both deploy memories were surfaced in this session already
    assert ask("what is the weather like today?") == ""  # nothing relevant: nothing, no padding
    assert ask("/compact") == ""
    tabs = ask("tabs or spaces for the indentation?")
    assert tabs == ""  # the drawer was shown in full at session start: already surfaced
    db = context_of(ask("which database, postgres?"), "UserPromptSubmit")
    assert "db-choice" in db and "(project, project memory, today)" in db and "This memory is" not in db
    # another session starts afresh
    other = event(proj, home, "UserPromptSubmit", sid="other-session", prompt="How do we deploy the shop?")
    assert "deploy-fridays" in hook(home, "recall", "--hook", stdin=json.dumps(other))[1]


def test_what_the_hooks_surfaced_is_recorded_per_session_and_per_day(world: tuple[Home, Path]) -> None:
    home, proj = world
    hook(home, "context", "--hook", stdin=json.dumps(event(proj, home, "SessionStart", source="startup")))
    for prompt in ("How do we deploy the shop?", "what is the weather like?"):
        hook(home, "recall", "--hook", stdin=json.dumps(event(proj, home, "UserPromptSubmit", prompt=prompt)))
    hook(home, "precompact", "--hook", stdin=json.dumps(event(proj, home, "PreCompact", trigger="auto",
                                                              custom_instructions="")))  # fmt: skip
    transcript = Path(event(proj, home, "x")["transcript_path"])
    transcript.parent.mkdir(parents=True, exist_ok=True)
    transcript.write_text(json.dumps({"type": "user", "sessionId": SID, "cwd": str(proj), "timestamp": "2026-11-30T10:00:00Z",
                                      "uuid": "u1", "message": {"role": "user", "content": "hi"}}) + "\n")  # fmt: skip

    run = [*memd_cmd(), "--home", str(home.root)]
    rows = json.loads(subprocess.run([*run, "sessions", "--json"], capture_output=True, text=True, env=memd_env()).stdout)
    [row] = [r for r in rows if r["session_id"] == SID]
    assert row["hooks"] == {"context": 1, "prompts": 2, "recalls": 1, "memories": 2, "compacts": 1}
    status = json.loads(subprocess.run([*run, "status", "--json"], capture_output=True, text=True, env=memd_env()).stdout)
    today = status["hooks"]["days"][0]
    assert today["day"] == time.strftime("%Y-%m-%d", time.gmtime()) and len(status["hooks"]["days"]) == 7
    assert (today["context"], today["prompts"], today["recalls"], today["memories"], today["compacts"]) == (1, 2, 1, 2, 1)
    text = subprocess.run([*run, "status"], capture_output=True, text=True, env=memd_env()).stdout
    assert f"recall by day: {today['day']} 1 of 2 prompts (2 memories), 1 session starts" in text


def test_pre_compact_leaves_a_summary_request_for_the_daemon(world: tuple[Home, Path]) -> None:
    home, proj = world
    ev = event(proj, home, "PreCompact", trigger="manual", custom_instructions="keep the API notes")
    rc, out, err = hook(home, "precompact", "--hook", stdin=json.dumps(ev))
    assert (rc, out) == (0, ""), err
    conn = state.connect(home.state_db)
    places = take_summary_requests(conn)
    assert [str(p) for p in places] == [f"session:{cwd_key(proj)}:{SID}"]
    assert take_summary_requests(conn) == []  # taken once
    conn.close()


@pytest.mark.parametrize(
    "stdin",
    [b"", b"not json", b"[1, 2]", b'{"hook_event_name": "SessionStart"', b"\xff\xfe\x00garbage", b'{"cwd": 5}'],
)
@pytest.mark.parametrize("command", ["context", "recall", "precompact"])
def test_any_error_prints_nothing_and_exits_0(world: tuple[Home, Path], command: str, stdin: bytes) -> None:
    home, _proj = world
    rc, out, err = hook(home, command, "--hook", stdin=stdin)
    assert rc == 0 and "Traceback" not in err
    if command == "context" and stdin == b'{"cwd": 5}':  # no usable cwd: the process's, a valid answer
        assert context_of(out, "SessionStart")
    else:
        assert out == "", out


def test_a_broken_home_never_blocks_the_session(tmp_path: Path) -> None:
    """Run as `memd connect` writes the commands (through the shell, as Claude Code runs them):
    even a usage error before memd's own code runs must not exit 2, which blocks a prompt."""

    bad = tmp_path / "file-not-dir"
    bad.write_text("x")
    ev = {"session_id": SID, "transcript_path": "/nowhere/x.jsonl", "cwd": str(tmp_path),
          "hook_event_name": "UserPromptSubmit", "prompt": "deploy"}  # fmt: skip
    for sub in ("context", "recall", "precompact"):
        r = subprocess.run(["/bin/sh", "-c", hook_command(Home(bad), sub)], input=json.dumps(ev), capture_output=True,
                           text=True, env=memd_env(), timeout=60)  # fmt: skip
        assert (r.returncode, r.stdout) == (0, ""), (sub, r.stderr)
    # a corrupt state database: the answer still comes, the record is skipped
    home = Home(tmp_path / "h")
    write_memory(home.global_memory, "prefers-tabs", render_memory("prefers-tabs", "tabs", "user", "Tabs."))
    refresh_all(home)
    home.state_db.write_bytes(b"not a database" * 100)
    rc, out, err = hook(home, "context", "--hook", stdin=json.dumps({**ev, "hook_event_name": "SessionStart"}))
    assert rc == 0 and "Tabs." in context_of(out, "SessionStart") and "not recorded" in err


def test_only_the_answer_reaches_stdout(world: tuple[Home, Path]) -> None:
    """A hook's stdout is the JSON Claude Code reads: logs and warnings go to stderr."""
    home, proj = world
    (home.root / "settings.json").write_text('{"memory": {"extractEveryTurns": -3}}')  # a settings warning
    rc, out, _err = hook(home, "recall", "--hook",
                         stdin=json.dumps(event(proj, home, "UserPromptSubmit", prompt="deploy on Fridays?")))  # fmt: skip
    assert rc == 0 and out.count("\n") == 1 and json.loads(out)["hookSpecificOutput"]


# --------------------------------------------------------------------------- the offline relevance floor


def test_content_terms() -> None:
    assert content_terms("How do we deploy the shop, please?") == ["deploy", "shop"]
    assert content_terms("Use snake_case in the API v2") == ["use", "snake", "case", "api"]
    assert content_terms("记忆系统怎么设计") == ["记忆", "忆系", "系统", "设计"]
    assert content_terms("deploy deploy DEPLOY") == ["deploy"]
    assert content_terms("a an of 12345 !!") == []
    assert len(content_terms(" ".join(f"word{i}" for i in range(100)))) == 24


def test_telling_terms_drop_words_found_in_most_memories() -> None:
    assert telling_terms({"deploy": 2, "the": 9, "zebra": 0}, scope_size=10) == ["deploy"]
    assert telling_terms({"deploy": 2, "shop": 3}, scope_size=3) == ["deploy", "shop"]  # too few memories to judge


def test_the_daemon_runs_the_summary_a_pre_compact_hook_asked_for(world: tuple[Home, Path]) -> None:
    """The request waits in the state; the daemon's due-check takes it and runs the summary job,
    forced (a short session is far below minInitTokens)."""

    home, proj = world
    (home.root / "settings.json").write_text(json.dumps({"memd": {"provider": "offline"}}))
    transcript = Path(event(proj, home, "x")["transcript_path"])
    transcript.parent.mkdir(parents=True, exist_ok=True)
    lines = [{"type": "user", "sessionId": SID, "cwd": str(proj), "timestamp": "2026-11-30T10:00:00Z", "uuid": "u1",
              "message": {"role": "user", "content": "Please plan the Friday deploy of the shop."}},
             {"type": "assistant", "sessionId": SID, "cwd": str(proj), "timestamp": "2026-11-30T10:00:05Z", "uuid": "a1",
              "parentUuid": "u1", "message": {"id": "m1", "role": "assistant", "content": [{"type": "text",
                                              "text": "Planned: migrations Thursday, code Friday."}]}}]  # fmt: skip
    transcript.write_text("".join(json.dumps(x) + "\n" for x in lines))
    ev = event(proj, home, "PreCompact", trigger="manual", custom_instructions="")
    assert hook(home, "precompact", "--hook", stdin=json.dumps(ev))[0] == 0
    target = f"session:{cwd_key(proj)}:{SID}"
    wait_log(home.root, event="job.finished", job="summary", target=target)  # the hook's own run

    def requests_left() -> int:
        conn = state.connect(home.state_db)
        try:
            return int(conn.execute("SELECT COUNT(*) FROM kv WHERE k LIKE 'summary-request:%'").fetchone()[0])
        finally:
            conn.close()

    assert requests_left() == 1
    with DaemonProc(home.root) as daemon:
        wait_for(lambda: requests_left() == 0)  # the daemon took the request (and found the summary current)
        daemon.stop()
    assert home.summary_file(cwd_key(proj), SID).exists()


# --------------------------------------------------------------------------- the summary after a compaction


SUMMARY = """# Session Title
Friday deploy of the shop

# Current State
Migrations ran on Thursday; the code goes out on Friday. Token for the deploy bot: ghp_abcdefghijklmnopqrstuvwxyz0123456789

# Task specification
Plan the Friday deploy of the shop.
"""


def _write_summary(home: Home, proj: Path, text: str) -> Path:
    path = home.summary_file(cwd_key(proj), SID)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_session_start_after_a_compaction_brings_the_summary_with_the_drawer(world: tuple[Home, Path]) -> None:
    home, proj = world
    path = _write_summary(home, proj, SUMMARY)
    rc, out, err = hook(home, "context", "--hook", stdin=json.dumps(event(proj, home, "SessionStart", source="compact")))
    assert rc == 0, err
    text = context_of(out, "SessionStart")
    assert "Migrations ran on Thursday" in text and str(path) in text and "# sessionSummary" in text
    assert "ghp_abcdefghijklmnopqrstuvwxyz0123456789" not in text and "[REDACTED:" in text
    assert "Tabs, never spaces." in text and len(text) <= 9_500
    for source in ("startup", "resume", "clear"):  # only a compaction loses the conversation
        rc, out, err = hook(home, "context", "--hook", stdin=json.dumps(event(proj, home, "SessionStart", source=source)))
        assert "Migrations ran on Thursday" not in context_of(out, "SessionStart")


def test_a_long_summary_is_cut_within_the_hooks_limit_and_names_its_file(world: tuple[Home, Path]) -> None:
    home, proj = world
    worklog = "\n".join(f"- step {i}: ran the migration check for table t{i} and it passed" for i in range(900))
    path = _write_summary(home, proj, SUMMARY + "\n# Worklog\n" + worklog + "\n")
    rc, out, err = hook(home, "context", "--hook", stdin=json.dumps(event(proj, home, "SessionStart", source="compact")))
    assert rc == 0, err
    text = context_of(out, "SessionStart")
    assert len(text) <= 9_500 and "Migrations ran on Thursday" in text and "Tabs, never spaces." in text
    assert f"Read {path} for the rest" in text and "step 899" not in text


def test_pre_compact_makes_the_summary_current_before_the_compacted_session_starts(world: tuple[Home, Path]) -> None:
    """No daemon runs: the PreCompact hook itself brings summary.md up to date (offline provider, well
    within its wait), and the SessionStart that follows the compaction carries it."""
    home, proj = world
    (home.root / "settings.json").write_text(json.dumps({"memd": {"provider": "offline"}}))
    transcript = Path(event(proj, home, "x")["transcript_path"])
    transcript.parent.mkdir(parents=True, exist_ok=True)
    lines = [{"type": "user", "sessionId": SID, "cwd": str(proj), "timestamp": "2026-11-30T10:00:00Z", "uuid": "u1",
              "message": {"role": "user", "content": "Please plan the Friday deploy of the shop."}},
             {"type": "assistant", "sessionId": SID, "cwd": str(proj), "timestamp": "2026-11-30T10:00:05Z", "uuid": "a1",
              "parentUuid": "u1", "message": {"id": "m1", "role": "assistant", "content": [{"type": "text",
                                              "text": "Planned: migrations Thursday, code Friday."}]}}]  # fmt: skip
    transcript.write_text("".join(json.dumps(x) + "\n" for x in lines))
    summary = home.summary_file(cwd_key(proj), SID)
    assert not summary.exists()
    (proj / "memd").mkdir()  # a project of its own called memd (Claude Code runs hooks in the project): the
    (proj / "memd" / "__init__.py").write_text("raise SystemExit(3)\n")  # summary's process must not import it
    rc, out, err = hook(home, "precompact", "--hook", stdin=json.dumps(event(proj, home, "PreCompact", trigger="auto")),
                        cwd=proj)  # fmt: skip
    assert (rc, out) == (0, ""), err
    assert "Friday deploy" in summary.read_text()
    rc, out, err = hook(home, "context", "--hook", stdin=json.dumps(event(proj, home, "SessionStart", source="compact")))
    assert "Friday deploy" in context_of(out, "SessionStart")


def test_pre_compact_does_not_wait_past_its_bound(world: tuple[Home, Path]) -> None:
    """A summary job still running when the wait ends is left to finish on its own (None): the
    agent's compaction is not held up by a slow model."""
    home, proj = world
    assert summarise_now(home, cwd_key(proj), SID, wait=0.0001) is None


def test_a_hook_whose_import_directory_went_still_runs_this_interpreters_memd(world: tuple[Home, Path],
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The directory a hook's program names goes when memd is reinstalled for the same interpreter path — a venv
    or `pipx reinstall` on a newer Python (lib/python3.11 → lib/python3.12): the hook must still run the memd that
    interpreter has, as `python -P -m memd` did, not die on an ImportError that `|| true` hides for good."""
    import memd.agent.connect as connect  # noqa: PLC0415 - this test's only

    home, proj = world
    monkeypatch.setattr(connect, "_import_root", lambda: str(home.root.parent / "venv/lib/python3.99/site-packages"))
    ev = json.dumps(event(proj, home, "SessionStart", source="startup"))
    for sub in ("context", "precompact"):
        r = subprocess.run(["/bin/sh", "-c", connect.hook_command(home, sub)], input=ev if sub == "context" else
                           json.dumps(event(proj, home, "PreCompact", trigger="manual")), capture_output=True, text=True,
                           env={k: v for k, v in memd_env().items() if k != "PYTHONPATH"}, timeout=60)  # fmt: skip
        assert r.returncode == 0 and "Error" not in r.stderr, (sub, r.stderr)
        if sub == "context":
            assert "Tabs, never spaces." in context_of(r.stdout, "SessionStart")
