"""Recall (SPEC §7b.1): pure ordering, prompt and parsing; real files, real SQLite, the real
`anthropic` client against the fake Messages API; and `memd recall` / `memd status` as processes."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic  # noqa: F401 - imported once here: the SDK's import time (seconds on a loaded machine) is not what these tests measure
import pytest

from memd.agent import candidates as recallcandidates
from memd.agent import recall as rc
from memd.agent.candidates import Candidate, merge_surfaced, order_candidates
from memd.agent.recall import parse_selection, render_prompt
from memd.index.refresh import refresh_all
from memd.index.search import open_readonly
from memd.memory.file import render_memory, write_memory
from memd.state import get_kv
from memd.tree import Home
from tests.fakeapi import (
    FakeAnthropic,
    delay,
    json_text,
    malformed,
    request_system_text,
    request_user_text,
    status,
    text,
)
from tests.jobkit import NOW, context, make_settings
from tests.procs import memd_env, run_memd

KEY = "-work-app"
OTHER = "-work-other"
T0 = NOW.timestamp()
DAY = 86_400


def put(directory: Path, name: str, description: str, body: str = "", kind: str = "project", age_s: float = 0) -> str:
    """Write one memory with a chosen age; returns its home-relative file key."""
    path = write_memory(directory, name, render_memory(name, description, kind, body or description))
    t = T0 - age_s
    os.utime(path, (t, t))
    return path.relative_to(directory.parents[2] if "projects" in path.parts else directory.parent).as_posix()


def cand(file: str, mtime: float = 0.0, name: str | None = None) -> Candidate:
    return Candidate(file, name or file.rsplit("/", 1)[-1][:-3], "d", "project", "project", KEY, mtime)


@pytest.fixture
def home(tmp_path: Path) -> Home:
    """A drawer, a project and another project, searchable."""
    h = Home(tmp_path / "home")
    g, p, o = h.global_memory, h.project_memory(KEY), h.project_memory(OTHER)
    put(g, "prefers-tabs", "the user indents with tabs", kind="user", age_s=3 * DAY)
    put(g, "terse-answers", "the user wants short answers", kind="feedback", age_s=2 * DAY)
    put(p, "deploy-fridays", "deploys happen only on Fridays", "Run make deploy on Fridays.", age_s=3600)
    put(p, "kube-cluster", "production runs on a Kubernetes cluster", "Deploy with kubectl apply.", age_s=7200)
    put(p, "db-choice", "Postgres, not MySQL", "Chosen for JSONB.", age_s=60)
    put(p, "记忆设计", "长期记忆系统的设计", "用户喜欢简洁的方案。", age_s=120)
    put(o, "other-deploy", "another project's deploy notes", "deploy with terraform")
    refresh_all(h)
    return h


@pytest.fixture
def search(home: Home) -> Iterator[sqlite3.Connection]:
    conn = open_readonly(home.search_db)
    yield conn
    conn.close()


@pytest.fixture
def api() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake


def msgs(api: FakeAnthropic) -> list:
    """Messages API requests (`FakeAnthropic.message_requests` reads the body, not the path)."""
    return [r for r in api.requests if r.path == "/v1/messages"]


def files(result: rc.Recall) -> list[str]:
    return [m.file for m in result.memories]


def P(name: str) -> str:
    return f"projects/{KEY}/memory/{name}.md"


# --------------------------------------------------------------------------- pure parts


def test_order_puts_hits_first_then_newest_excludes_surfaced_and_caps() -> None:
    hits = [cand("h2.md", 1), cand("h1.md", 9)]
    rest = [cand(f"r{i:03d}.md", float(i)) for i in range(300)] + [cand("h1.md", 9)]
    out = order_candidates(hits, rest, surfaced={"h2.md", "r299.md"}, limit=200)
    assert len(out) == 200
    assert [c.file for c in out[:3]] == ["h1.md", "r298.md", "r297.md"]  # hit first, then by recency
    assert len({c.file for c in out}) == 200 and "h2.md" not in {c.file for c in out}


def test_order_breaks_age_ties_by_file() -> None:
    out = order_candidates([], [cand("b.md", 5), cand("a.md", 5), cand("c.md", 6)])
    assert [c.file for c in out] == ["c.md", "a.md", "b.md"]


def test_prompt_numbers_candidates_and_flattens_lines() -> None:
    cs = [cand("memory/a.md", T0, name="a\nname"), cand(P("b"), T0 - DAY)]
    prompt = render_prompt("what about\n deploys?", cs)
    assert prompt.splitlines()[0] == "Query: what about deploys?"
    assert "1. [project] a name — d (file: memory/a.md; 2026-11-30)" in prompt
    assert f"2. [project] b — d (file: {P('b')}; 2026-11-29)" in prompt
    assert "Memories (2):" in prompt


CS = [cand("memory/tabs.md"), cand(P("deploy")), cand(P("db")), cand("memory/db.md"), cand(P("x")),
      cand(P("y")), cand(P("z"))]  # fmt: skip


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ('{"selected": [2, 1]}', [P("deploy"), "memory/tabs.md"]),
        ('{"selected": []}', []),
        ('{"selected": [2, 2, "2", "projects/-work-app/memory/deploy.md"]}', [P("deploy")]),  # deduplicated
        ('{"selected": [0, 8, -1, 99, "nope.md", null, 2.0, true, [1], {"a": 1}]}', []),  # unknowns ignored
        ('{"selected": ["tabs.md", "db.md", "memory/db.md"]}', ["memory/tabs.md", "memory/db.md"]),  # db.md ambiguous
        ('{"selected": [1, 2, 3, 4, 5, 6, 7]}', [c.file for c in CS[:5]]),  # at most 5
        ('```json\n{"selected": [3]}\n```', [P("db")]),
        ('Here you go: {"selected": [3]} — hope it helps', [P("db")]),
    ],
)
def test_parse_selection(answer: str, expected: list[str]) -> None:
    picks = parse_selection(answer, CS)
    assert picks is not None and [c.file for c in picks] == expected


@pytest.mark.parametrize(
    "answer", ["", "3, 5", "I pick number 3", '{"chosen": [1]}', '{"selected": 3}', '[1, 2]', '{"selected": [1',
               '{"selected": "1,2"}'],
)  # fmt: skip
def test_malformed_answers_are_none(answer: str) -> None:
    assert parse_selection(answer, CS) is None


def test_parse_honours_a_lower_limit() -> None:
    picks = parse_selection('{"selected": [1, 2, 3]}', CS, limit=2)
    assert picks is not None and len(picks) == 2


def test_merge_surfaced_keeps_order_once_and_bounds() -> None:
    assert merge_surfaced(["a", "b"], ["b", "c"]) == ["a", "b", "c"]
    assert merge_surfaced([str(i) for i in range(5)], ["9"], keep=3) == ["3", "4", "9"]


def test_call_with_deadline_abandons_a_slow_call() -> None:
    # The slow call ends only when released (after the check), so "abandoned" needs no tight clock;
    # the quick calls get a deadline a starved thread on a loaded machine still meets.
    release = threading.Event()
    t = time.monotonic()
    with pytest.raises(rc.RecallFailed):
        rc.call_with_deadline(lambda: release.wait(120), 0.1)
    assert time.monotonic() - t < 60 and not release.is_set()
    release.set()
    assert rc.call_with_deadline(lambda: 7, 30.0) == 7
    with pytest.raises(KeyError):
        rc.call_with_deadline(lambda: {}["x"], 30.0)


# --------------------------------------------------------------------------- candidates from the DB


def test_candidates_capped_at_200_with_search_hits_first(tmp_path: Path) -> None:
    h = Home(tmp_path / "big")
    pdir = h.project_memory(KEY)
    for i in range(240):
        put(pdir, f"note-{i:03d}", f"routine note number {i}", f"nothing special {i}", age_s=i * 60)
    old_hits = {put(pdir, f"zebra-{i}", f"zebra fact {i}", "zebras are striped", age_s=400 * DAY) for i in range(3)}
    put(h.global_memory, "global-zebra", "zebra in the drawer", "the drawer knows zebras", kind="user", age_s=500 * DAY)
    put(h.project_memory(OTHER), "foreign-zebra", "another project's zebra", "not in scope")
    refresh_all(h)
    conn = open_readonly(h.search_db)
    try:
        cands, hits = recallcandidates.fetch_candidates(conn, "zebra", KEY, surfaced=[P("note-000")])
    finally:
        conn.close()
    assert len(cands) == 200
    assert {c.file for c in cands[:4]} == old_hits | {"memory/global-zebra.md"}  # hits first though oldest
    assert [c.file for c in hits] == [c.file for c in cands[:4]]
    rest = cands[4:]
    assert [c.file for c in rest[:2]] == [P("note-001"), P("note-002")]  # then newest first, surfaced skipped
    assert all(a.mtime >= b.mtime for a, b in zip(rest, rest[1:]))
    assert not any("foreign" in c.file for c in cands)


# --------------------------------------------------------------------------- the model path


def test_model_picks_are_honoured_and_recorded(home: Home, search: sqlite3.Connection, api: FakeAnthropic) -> None:
    api.enqueue(json_text({"selected": [P("kube-cluster"), 1, 99, "nope.md"]}))
    ctx = context(home.root, make_settings(), fake_url=api.url)
    result = rc.recall(ctx, search, "how do we deploy?", project_key=KEY, session="s1")
    assert result.source == "model" and result.warning is None
    assert files(result) == [P("kube-cluster"), P("deploy-fridays")]  # 1 = the best hit for "deploy"
    (req,) = msgs(api)
    assert req["model"] == "claude-haiku-4-5" and req["max_tokens"] == rc.MAX_ANSWER_TOKENS
    assert '{"selected"' in request_system_text(req)
    prompt = request_user_text(req)
    assert prompt.startswith("Query: how do we deploy?")
    assert "other-deploy" not in prompt  # another project's memory is no candidate
    assert prompt.count("\n1. ") == 1 and "6. " in prompt and "7. " not in prompt  # 6 in scope
    assert json.loads(get_kv(ctx.conn, "recall:-work-app:s1") or "[]") == files(result)
    row = ctx.conn.execute("SELECT job, tier, ok FROM model_calls").fetchone()
    assert tuple(row) == ("recall", "small", 1)


def test_at_most_five_even_if_the_model_lists_more(home: Home, search: sqlite3.Connection, api: FakeAnthropic) -> None:
    api.enqueue(json_text({"selected": [1, 2, 3, 4, 5, 6]}))
    ctx = context(home.root, make_settings(), fake_url=api.url)
    assert len(rc.recall(ctx, search, "anything", project_key=KEY).memories) == 5


def test_surfaced_files_are_excluded_for_the_session(home: Home, search: sqlite3.Connection, api: FakeAnthropic) -> None:
    ctx = context(home.root, make_settings(), fake_url=api.url)
    api.enqueue(json_text({"selected": [1, 2]}))
    first = files(rc.recall(ctx, search, "deploy", project_key=KEY, session="s1"))
    api.enqueue(json_text({"selected": [1]}))
    second = files(rc.recall(ctx, search, "deploy", project_key=KEY, session="s1"))
    assert second and not set(second) & set(first)
    shown = request_user_text(msgs(api)[1])
    assert all(f not in shown for f in first)  # not even offered again
    assert json.loads(get_kv(ctx.conn, "recall:-work-app:s1") or "[]") == first + second
    api.enqueue(json_text({"selected": [1]}))
    other = files(rc.recall(ctx, search, "deploy", project_key=KEY, session="s2"))
    assert other == first[:1]  # another session starts afresh
    api.enqueue(json_text({"selected": [1]}))
    assert files(rc.recall(ctx, search, "deploy", project_key=KEY)) == first[:1]  # no session: nothing excluded
    assert get_kv(ctx.conn, f"recall:{KEY}:None") is None


@pytest.mark.parametrize("reply", [text("I would pick 1 and 3."), text('{"selected": "all"}'), malformed()])
def test_malformed_answer_gives_the_keyword_ranking(home: Home, search: sqlite3.Connection, api: FakeAnthropic,
                                                    reply) -> None:  # fmt: skip
    api.enqueue(reply)
    ctx = context(home.root, make_settings(), fake_url=api.url)
    result = rc.recall(ctx, search, "deploy", project_key=KEY, session="s1", limit=1)
    assert result.source == "offline" and "malformed" in (result.warning or "")
    assert files(result) == [P("deploy-fridays")]  # what the offline provider picks
    assert len(msgs(api)) == 1


def test_slow_answer_is_cut_at_the_deadline_and_keywords_answer(home: Home, search: sqlite3.Connection,
                                                                 api: FakeAnthropic) -> None:  # fmt: skip
    api.enqueue(delay(10, json_text({"selected": [2]})))
    ctx = context(home.root, make_settings(), fake_url=api.url)  # its own LLM would retry 3 times
    result = rc.recall(ctx, search, "deploy", project_key=KEY, session="s1", limit=1,
                       deadline=time.monotonic() + rc.HOOK_BUDGET_S)  # fmt: skip
    # the model's answer (candidate 2) never came: the deadline cut it, not the 10 s answer
    assert result.source == "offline" and files(result) == [P("deploy-fridays")]
    assert result.warning and ("timed out" in result.warning or "no answer within" in result.warning)
    assert len(msgs(api)) == 1  # no retry


def test_server_errors_give_keywords_without_retrying(home: Home, search: sqlite3.Connection, api: FakeAnthropic) -> None:
    api.enqueue(status(500), status(500), json_text({"selected": [1]}))
    ctx = context(home.root, make_settings(), fake_url=api.url)
    result = rc.recall(ctx, search, "deploy", project_key=KEY, session="s1")
    assert result.source == "offline" and "HTTP 500" in (result.warning or "")
    assert len(msgs(api)) == 1


def test_no_time_left_means_no_call(home: Home, search: sqlite3.Connection, api: FakeAnthropic) -> None:
    ticks = iter([0.0, rc.TIMEOUT_S - 0.05, rc.TIMEOUT_S, rc.TIMEOUT_S])
    ctx = context(home.root, make_settings(), fake_url=api.url)
    result = rc.recall(ctx, search, "deploy", project_key=KEY, monotonic=lambda: next(ticks))
    assert result.source == "offline" and "no time left" in (result.warning or "")
    assert msgs(api) == []


def test_spent_budget_returns_nothing(home: Home, search: sqlite3.Connection, api: FakeAnthropic) -> None:
    ctx = context(home.root, make_settings({"dailyTokenBudget": 10}), fake_url=api.url)
    ctx.conn.execute("INSERT INTO model_calls(ts, day, job, model, input_tokens, output_tokens, ok) "
                     "VALUES ('x', ?, 'extract', 'm', 50, 0, 1)", (NOW.date().isoformat(),))  # fmt: skip
    result = rc.recall(ctx, search, "deploy", project_key=KEY)
    assert result.source == "offline" and "budget" in (result.warning or "")
    assert msgs(api) == []


def test_no_candidates_no_call(tmp_path: Path, api: FakeAnthropic) -> None:
    h = Home(tmp_path / "empty")
    refresh_all(h)
    ctx = context(h.root, make_settings(), fake_url=api.url)
    conn = open_readonly(h.search_db)
    try:
        result = rc.recall(ctx, conn, "deploy", project_key=KEY)
    finally:
        conn.close()
    assert result.memories == [] and result.candidates == 0 and result.warning is None
    assert msgs(api) == []


# --------------------------------------------------------------------------- offline


def test_offline_returns_top_search_hits(home: Home, search: sqlite3.Connection) -> None:
    ctx = context(home.root, make_settings())  # no fake URL: the offline provider
    result = rc.recall(ctx, search, "deploy", project_key=KEY, session="s1", limit=1)
    assert result.source == "offline" and files(result) == [P("deploy-fridays")]
    again = rc.recall(ctx, search, "deploy", project_key=KEY, session="s1")
    assert files(again) == [P("kube-cluster")]  # the surfaced one is skipped, the next hit comes up
    assert rc.recall(ctx, search, "nothing-matches-this", project_key=KEY).memories == []  # hits only, no recency
    cjk = rc.recall(ctx, search, "记忆", project_key=KEY, bodies=True)
    assert [m.name for m in cjk.memories] == ["记忆设计"] and cjk.memories[0].body == "用户喜欢简洁的方案。"


# --------------------------------------------------------------------------- the command


@pytest.mark.slow
def test_cli_with_the_model(home: Home, api: FakeAnthropic) -> None:
    api.enqueue(json_text({"selected": [P("db-choice"), "memory/prefers-tabs.md"]}), json_text({"selected": [1]}))
    env = memd_env(ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="sk-ant-test")
    line = {"type": "user", "message": {"role": "user", "content": "which database?"}, "uuid": "u9", "sessionId": "s9"}
    (home.projects / KEY / "s9.jsonl").write_text(json.dumps(line) + "\n")  # --session names a session memd can read
    r = run_memd(home.root, "recall", "which database?", "--project", KEY, "--session", "s9", "--json", "--body", env=env)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [x["file"] for x in rows] == [P("db-choice"), "memory/prefers-tabs.md"]
    assert set(rows[0]) == {"file", "name", "description", "type", "scope", "project_key", "mtime", "stale", "body"}
    assert rows[0]["body"] == "Chosen for JSONB." and rows[0]["scope"] == "project" and rows[0]["project_key"] == KEY
    assert rows[1]["scope"] == "global" and rows[1]["project_key"] is None
    # staleness against the real clock: every fixture file is dated around jobkit's NOW
    assert all(x["stale"] is None or "old. Memories are point-in-time" in x["stale"] for x in rows)
    r = run_memd(home.root, "recall", "which database?", "--project", KEY, "--session", "s9", "--json", env=env)
    assert P("db-choice") not in request_user_text(msgs(api)[1])
    assert "body" not in json.loads(r.stdout)[0]


def test_cli_failure_is_the_keyword_ranking_exit_0_with_a_warning(home: Home, api: FakeAnthropic) -> None:
    api.enqueue(status(529), status(529))
    env = memd_env(ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="sk-ant-test")
    r = run_memd(home.root, "recall", "deploy", "--project", KEY, "--json", env=env)
    assert r.returncode == 0 and json.loads(r.stdout)[0]["file"] == P("deploy-fridays")
    assert "recall.failed" in r.stderr and "529" in r.stderr
    (home.root / "settings.json").write_text('{"memd": {"provider": "anthropic"}}')
    r = run_memd(home.root, "recall", "deploy", "--project", KEY, "--json")  # anthropic chosen, no key
    assert r.returncode == 0 and json.loads(r.stdout)[0]["file"] == P("deploy-fridays") and "no API key" in r.stderr
    r = run_memd(home.root, "recall", "quantum entanglement", "--project", KEY, "--json")
    assert r.returncode == 0 and json.loads(r.stdout) == []  # nothing relevant: still nothing


def test_cli_offline_marks_old_memories_stale(tmp_path: Path) -> None:
    h = Home(tmp_path / "h")
    now = time.time()
    for name, age in (("tabs-old", 3 * DAY), ("tabs-new", 600)):
        p = write_memory(h.global_memory, name, render_memory(name, f"{name} indents with tabs", "user", "Use tabs."))
        os.utime(p, (now - age, now - age))
    r = run_memd(h.root, "recall", "tabs", "--project", KEY, "--json")  # no key: offline
    assert r.returncode == 0, r.stderr
    stale = {x["name"]: x["stale"] for x in json.loads(r.stdout)}
    assert stale["tabs-new"] is None and stale["tabs-old"].startswith("This memory is 3 days old.")
    r = run_memd(h.root, "recall", "tabs", "--project", KEY)
    assert r.returncode == 0 and r.stdout.count("⚠ This memory is 3 days old.") == 1


def test_status_shows_an_over_budget_index_and_an_unreadable_file(tmp_path: Path) -> None:
    h = Home(tmp_path / "h")
    pdir = h.project_memory(KEY)
    for i in range(205):
        write_memory(pdir, f"m-{i:03d}", render_memory(f"m-{i:03d}", f"memory number {i}", "project", "x"))
    (pdir / "broken.md").write_text("no front matter here\n")
    r = run_memd(h.root, "run-now", "index")
    assert r.returncode == 0, r.stderr
    r = run_memd(h.root, "status", "--json")
    warnings = json.loads(r.stdout)["warnings"]
    assert any("206 entries" in w and "over the 200-line" in w for w in warnings), warnings  # broken.md is one (§14)
    assert any(w.startswith(str(pdir / "broken.md")) and "no front matter: indexed as" in w for w in warnings), warnings
