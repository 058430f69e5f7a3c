"""The job against the fake API (the real client), faults, pause, hand edits, and the offline provider."""

from __future__ import annotations

import json
from pathlib import Path

from jobs import extract
from memd.index.refresh import refresh_all
from memd.job.context import get_cursor, set_cursor
from memd.job.runner import run_job
from memd.ledger import pause
from memd.memory.scan import scan_dir
from memd.tree import Home, Place
from tests.fakeapi import (
    FAKE_SECRET,
    FakeAnthropic,
    malformed,
    op,
    op_absolute_path,
    op_huge_body,
    op_path_traversal,
    op_secret_body,
    op_unknown_type,
    ops_reply,
    status,
    text,
)
from tests.jobkit import context, ingest, make_settings, write_session

KEY = "-work-repo"
SID = "s1"
TARGET = Place("session", KEY, SID)


def msgs(api: FakeAnthropic) -> list[dict]:
    return [r for r in api.requests if r.path == "/v1/messages"]


def _home(tmp_path: Path, turns: list[tuple[str, str]]) -> Path:
    home = tmp_path / "h"
    write_session(home / "projects" / KEY / f"{SID}.jsonl", turns)
    ingest(home)
    return home


DURABLE = [("user", "Please always run the linter before committing; broken CI costs us hours."),
           ("assistant", "Understood.")]  # fmt: skip


def test_gate_no_makes_one_small_call_and_moves_the_cursor(tmp_path: Path) -> None:
    home = _home(tmp_path, [("user", "what does this function do exactly?"), ("assistant", "It parses.")])
    with FakeAnthropic([text("no")]) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url)
        r = run_job(ctx, extract, TARGET)
        assert r.outcome == "ok" and r.details["gate"] == "no"
        (req,) = msgs(api)
        assert req["model"] == "claude-haiku-4-5" and req["max_tokens"] <= 5
    assert get_cursor(ctx.conn, "extract", str(TARGET))["human_turns"] == 1
    assert run_job(ctx, extract, TARGET).outcome == "skipped"  # idempotent: nothing new


def test_gate_yes_extracts_into_the_right_scopes(tmp_path: Path) -> None:
    home = _home(tmp_path, DURABLE)
    ops = ops_reply(op(scope="global", name="run-linter-first", type="feedback", description="run the linter before committing"),
                    op(scope="project", name="ci-is-slow", type="project", description="CI takes hours to rerun"))  # fmt: skip
    with FakeAnthropic([text("yes"), ops]) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url)
        r = run_job(ctx, extract, TARGET)
        assert r.outcome == "ok" and r.details["applied"]["added"] == 2, r
        _gate, ex = msgs(api)
        assert ex["model"] == "claude-sonnet-4-6"
        assert "Please always run the linter" in json.dumps(ex["messages"])
        assert ex["system"][0]["cache_control"] == {"type": "ephemeral"}
    g = scan_dir(home / "memory", "global", None).memories
    p = scan_dir(home / "projects" / KEY / "memory", "project", KEY).memories
    assert [m.name for m in g] == ["run-linter-first"] and [m.name for m in p] == ["ci-is-slow"]
    assert g[0].metadata["provider"] == "anthropic" and g[0].metadata["session"] == SID
    assert "run-linter-first" in (home / "memory" / "MEMORY.md").read_text()
    assert "ci-is-slow" in (home / "projects" / KEY / "memory" / "MEMORY.md").read_text()
    calls = ctx.conn.execute("SELECT job, ok FROM model_calls ORDER BY id").fetchall()
    assert [tuple(c) for c in calls] == [("gate", 1), ("extract", 1)]


def test_hostile_operations_are_refused_and_the_rest_apply(tmp_path: Path) -> None:
    home = _home(tmp_path, DURABLE)
    ops = ops_reply(op_path_traversal(), op_absolute_path(), op_huge_body(), op_unknown_type(), op_secret_body(),
                    op(name="good-one"))  # fmt: skip
    with FakeAnthropic([text("yes"), ops]) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url)
        r = run_job(ctx, extract, TARGET)
    assert r.outcome == "ok" and r.details["rejected"] == 4
    files = sorted(p.name for p in (home / "projects" / KEY / "memory").iterdir())
    assert files == ["MEMORY.md", "deploy-key.md", "good-one.md"]
    body = (home / "projects" / KEY / "memory" / "deploy-key.md").read_text()
    assert FAKE_SECRET not in body and "REDACTED" in body
    assert not (tmp_path / ".bashrc").exists() and not list(tmp_path.glob("**/.bashrc"))


def test_malformed_answer_leaves_cursor_and_files_untouched_then_retries(tmp_path: Path) -> None:
    home = _home(tmp_path, DURABLE)
    with FakeAnthropic([text("yes"), text("I think you should remember the linter thing!")]) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url)
        r = run_job(ctx, extract, TARGET)
        assert r.outcome == "failed" and "extraction answer refused" in r.reason
        assert get_cursor(ctx.conn, "extract", str(TARGET)) is None
        assert not (home / "projects" / KEY / "memory").exists() and not list((home / "memory").glob("*.md"))
        api.enqueue(text("yes"), ops_reply(op(name="lint-first")))
        assert run_job(ctx, extract, TARGET).outcome == "ok"
    assert get_cursor(ctx.conn, "extract", str(TARGET))["offset"] > 0


def test_http_faults_are_retried(tmp_path: Path) -> None:
    home = _home(tmp_path, DURABLE)
    slept: list[float] = []
    with FakeAnthropic([status(429, retry_after=2), status(529), text("yes"), status(500), ops_reply(op())]) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url, sleep=slept.append)
        r = run_job(ctx, extract, TARGET)
    assert r.outcome == "ok", r
    assert slept and slept[0] >= 2


def test_malformed_http_body_fails_the_run(tmp_path: Path) -> None:
    home = _home(tmp_path, DURABLE)
    with FakeAnthropic([malformed()] * 5) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url)
        r = run_job(ctx, extract, TARGET)
    assert r.outcome == "failed"
    assert get_cursor(ctx.conn, "extract", str(TARGET)) is None


def test_unclear_gate_counts_as_no(tmp_path: Path) -> None:
    home = _home(tmp_path, DURABLE)
    with FakeAnthropic([text("Perhaps; it depends on the project.")]) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url)
        r = run_job(ctx, extract, TARGET)
        assert r.details["gate"] == "no" and len(msgs(api)) == 1


def test_pre_gate_skips_the_model_for_tool_output(tmp_path: Path) -> None:
    home = _home(tmp_path, [("user", "ok"), ("assistant", "Running.")])
    with FakeAnthropic([]) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url)
        r = run_job(ctx, extract, TARGET)
        assert r.outcome == "ok" and "pre-gate" in r.reason and msgs(api) == []


def test_paused_session_writes_nothing(tmp_path: Path) -> None:
    home = tmp_path / "h"
    p = home / "projects" / KEY / f"{SID}.jsonl"
    write_session(p, [("user", "<command-name>/pause-memory</command-name>")])
    write_session(p, DURABLE, start=1)
    ingest(home)
    with FakeAnthropic([]) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url)
        r = run_job(ctx, extract, TARGET)
        assert msgs(api) == []
    assert r.outcome == "skipped" and r.reason == "paused"
    assert not (home / "projects" / KEY / "memory").exists()


def test_cli_pause_writes_nothing(tmp_path: Path) -> None:
    """`memd pause` governs what is said after it: the durable line that follows is never judged."""

    home = _home(tmp_path, [("user", "hello"), ("assistant", "Hi.")])
    with FakeAnthropic([]) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url)
        pause.say(ctx.conn, KEY, SID, True, "2026-11-30T11:00:00.000Z")
        write_session(home / "projects" / KEY / f"{SID}.jsonl", DURABLE, start=2)
        ingest(home)
        run_job(ctx, extract, TARGET)
        assert msgs(api) == []
        cur = json.loads(ctx.conn.execute("SELECT value FROM cursors WHERE job='extract'").fetchone()[0])
        assert cur["paused"] is True
    assert not (home / "projects" / KEY / "memory").exists()


def test_cli_resume_after_a_transcript_pause_extracts_what_follows(tmp_path: Path) -> None:
    """The later word wins both ways: `/pause-memory` in the transcript, then `memd resume`."""

    home = tmp_path / "h"
    p = home / "projects" / KEY / f"{SID}.jsonl"
    write_session(p, [("user", "<command-name>/pause-memory</command-name>"),
                      ("user", "My home address is a secret; do not keep it."), ("assistant", "OK.")])  # fmt: skip
    ingest(home)
    with FakeAnthropic([]) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url)
        assert run_job(ctx, extract, TARGET, force=True).reason == "paused"
        pause.say(ctx.conn, KEY, SID, False, "2026-11-30T11:00:00.000Z")
        row = dict(ctx.conn.execute("SELECT * FROM sessions").fetchone())
        assert pause.effective(row) is False
    write_session(p, DURABLE, start=3)
    ingest(home)
    with FakeAnthropic([text("no")]) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url)
        r = run_job(ctx, extract, TARGET)
        [gate] = msgs(api)
    assert r.outcome == "ok" and "linter" in str(gate) and "home address" not in str(gate)


def test_force_never_overrides_memory_disabled(tmp_path: Path) -> None:
    home = _home(tmp_path, DURABLE)
    with FakeAnthropic([]) as api:
        ctx = context(home, make_settings(memory={"enabled": False}), fake_url=api.base_url)
        r = run_job(ctx, extract, TARGET, force=True)
        assert r.outcome == "skipped" and "memory disabled" in r.reason and msgs(api) == []
    assert not (home / "projects" / KEY / "memory").exists()


def test_hand_edited_memory_is_never_overwritten_blindly(tmp_path: Path) -> None:
    """A memory the model names without having seen it is shown to it in one more call (issue 13);
    what that second answer still names unseen is refused, and there is no third call."""
    home = _home(tmp_path, DURABLE)
    mdir = home / "projects" / KEY / "memory"
    mdir.mkdir(parents=True)
    hand = "---\nname: zebra-notes\ndescription: hand written\nmetadata:\n  type: project\n---\nMy own words.\n"
    yak = "---\nname: yak-notes\ndescription: also by hand\nmetadata:\n  type: project\n---\nYak words.\n"
    (mdir / "zebra-notes.md").write_text(hand)
    (mdir / "yak-notes.md").write_text(yak)
    first = ops_reply(op(op="update", name="zebra-notes", body="overwritten"))
    second = ops_reply(op(op="update", name="yak-notes", body="overwritten too"))
    with FakeAnthropic([text("yes"), first, second]) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url)
        r = run_job(ctx, extract, TARGET)
        _gate, ask, again = msgs(api)
    assert "My own words." not in json.dumps(ask["messages"]) and "My own words." in json.dumps(again["messages"])
    assert "Yak words." not in json.dumps(again["messages"])
    assert r.outcome == "ok" and r.details["applied"]["refused"] == 1
    assert (mdir / "zebra-notes.md").read_text() == hand and (mdir / "yak-notes.md").read_text() == yak


def test_related_memory_body_is_part_of_the_call_and_then_updated(tmp_path: Path) -> None:
    home = _home(tmp_path, DURABLE)
    mdir = home / "projects" / KEY / "memory"
    mdir.mkdir(parents=True)
    (mdir / "linter.md").write_text("---\nname: linter\ndescription: linter rules\nmetadata:\n  type: feedback\n"
                                    "---\nRun the linter before committing; hand-edited detail.\n")  # fmt: skip
    refresh_all(Home(home))
    with FakeAnthropic([text("yes"), ops_reply(op(op="update", name="linter", type="feedback", body="merged"))]) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url)
        r = run_job(ctx, extract, TARGET)
        assert "hand-edited detail" in json.dumps(msgs(api)[1]["messages"])
    assert r.details["applied"]["updated"] == 1
    assert "merged" in (mdir / "linter.md").read_text()


def test_budget_exceeded_defers(tmp_path: Path) -> None:
    home = _home(tmp_path, DURABLE)
    with FakeAnthropic([]) as api:
        ctx = context(home, make_settings(memd={"dailyTokenBudget": 10}), fake_url=api.base_url)
        ctx.conn.execute("INSERT INTO model_calls(ts, day, job, model, input_tokens, output_tokens, ok) "
                         "VALUES ('x', '2026-11-30', 'gate', 'm', 50, 5, 1)")  # fmt: skip
        r = run_job(ctx, extract, TARGET)
        assert r.outcome == "deferred" and msgs(api) == []
    assert get_cursor(ctx.conn, "extract", str(TARGET)) is None


def test_offline_provider_extracts_deterministically(tmp_path: Path) -> None:
    home = _home(tmp_path, [("user", "Remember that we deploy only on Fridays."), ("assistant", "Noted."),
                            ("user", "I prefer short commit messages."), ("assistant", "Ok.")])  # fmt: skip
    ctx = context(home, make_settings(memd={"provider": "offline"}))
    assert run_job(ctx, extract, TARGET).outcome == "ok"
    g = scan_dir(home / "memory", "global", None).memories
    p = scan_dir(home / "projects" / KEY / "memory", "project", KEY).memories
    assert [m.type for m in g] == ["user"] and [m.type for m in p] == ["project"]
    assert all(m.metadata["provider"] == "offline" for m in g + p)
    before = {f: f.read_bytes() for f in (home / "memory").glob("*.md")}

    set_cursor(ctx.conn, "extract", str(TARGET), {"offset": 0, "human_turns": 0}, "x")  # a crash before the cursor moved
    assert run_job(ctx, extract, TARGET).outcome == "ok"
    assert {f: f.read_bytes() for f in (home / "memory").glob("*.md")} == before


ZH = [("user", "以后提交信息请用中文写，不要用英文。"), ("assistant", "好的。")]


def test_the_extraction_prompt_asks_for_the_users_language(tmp_path: Path) -> None:
    """Issue 26 point 5: the model is asked to write each memory in the language of its statement, and a
    conversation in Chinese is named as such in the request the API receives."""
    home = _home(tmp_path, ZH)
    reply = ops_reply(op(scope="global", name="commit-messages-in-chinese", type="feedback",
                         description="提交信息用中文写", body="**为什么：** 用户要求。\n**怎么用：** 每次提交都用中文。"))  # fmt: skip
    with FakeAnthropic([text("yes"), reply]) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url)
        assert run_job(ctx, extract, TARGET).outcome == "ok"
        _gate, ex = msgs(api)
    system = json.dumps(ex["system"], ensure_ascii=False)
    assert "in the user's language" in system and "**为什么：**" in system and "**怎么用：**" in system
    user = json.dumps(ex["messages"], ensure_ascii=False)
    assert "statements are in Chinese: write the memories that come from them in Chinese" in user
    [m] = scan_dir(home / "memory", "global", None).memories
    assert m.description == "提交信息用中文写" and "**为什么：**" in m.body


def test_an_english_conversation_gets_no_language_note(tmp_path: Path) -> None:
    home = _home(tmp_path, DURABLE)
    with FakeAnthropic([text("yes"), ops_reply()]) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url)
        assert run_job(ctx, extract, TARGET).outcome == "ok"
        _gate, ex = msgs(api)
    assert "in Chinese: write" not in json.dumps(ex["messages"], ensure_ascii=False)
