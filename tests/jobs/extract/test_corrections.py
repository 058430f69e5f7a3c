"""Corrections land (issue 13): the lookup shows the memory a correction is about even when the words
differ, and a memory the model changes without having been shown it is fetched and asked about once
more — through the real `anthropic` client against the fake Messages API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jobs import extract
from jobs.extract import prompt
from jobs.extract.related import rank
from memd.job.runner import run_job
from memd.memory.file import Memory, render_memory, write_memory
from memd.memory.scan import scan_dir
from memd.tree import Home, Place
from tests.fakeapi import FakeAnthropic, op, ops_reply, text
from tests.jobkit import context, ingest, make_settings, write_session

KEY = "-work-shop"
SID = "s1"
TARGET = Place.session(KEY, SID)
DATA = Path(__file__).resolve().parents[2] / "data" / "corrections.jsonl"
UV_BODY = "Run `uv sync`; the lock file is uv.lock. **Why:** faster than pip-tools."
POETRY_BODY = "Dependencies are managed with poetry; `poetry install`. **Why:** the team switched from uv."


def put(directory: Path, name: str, description: str, body: str, mtype: str = "project") -> None:
    directory.mkdir(parents=True, exist_ok=True)
    write_memory(directory, name, render_memory(name, description, mtype, body, {}))


def shop(home: Path) -> None:
    """A project with `uses-uv` among neighbours, and a drawer."""
    mem = home / "projects" / KEY / "memory"
    put(mem, "uses-uv", "Python dependencies are managed with uv", UV_BODY)
    put(mem, "node-pnpm", "frontend packages are installed with pnpm", "pnpm workspaces; pnpm-lock.yaml is committed.")
    put(mem, "black-formatting", "Python code is formatted with black", "black --line-length 100 in pre-commit.")
    put(mem, "deploy-only-fridays", "deploys happen only on Fridays", "Production deploys on Fridays only.")
    put(home / "memory", "editor-neovim", "the user edits in Neovim", "Neovim with LSP.", "user")


def memories(home: Path) -> list[Memory]:
    return (scan_dir(home / "memory", "global", None).memories
            + scan_dir(home / "projects" / KEY / "memory", "project", KEY).memories)  # fmt: skip


def strong(api: FakeAnthropic) -> list[dict[str, Any]]:
    return [r for r in api.requests if r.path == "/v1/messages" and r["model"] == "claude-sonnet-4-6"]


# -- the lookup ----------------------------------------------------------------------------------


@pytest.mark.parametrize("said", ["we switched to poetry, uv is gone", "The package manager changed: it's poetry now.",
                                  "uv is out.", "Dependencies are handled by pip-tools again."])  # fmt: skip
def test_the_lookup_finds_the_memory_a_correction_is_about(tmp_path: Path, said: str) -> None:
    shop(tmp_path)
    found = [m.name for m in rank(memories(tmp_path), said, prompt.RELATED_BODIES)]
    assert found and found[0] == "uses-uv", found


def test_the_lookup_returns_nothing_for_unrelated_words(tmp_path: Path) -> None:
    shop(tmp_path)
    assert rank(memories(tmp_path), "thanks, that worked!", 8) == []


def load_corrections() -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    rows = [json.loads(x) for x in DATA.read_text(encoding="utf-8").splitlines() if x.strip()]
    return {r["id"]: r for r in rows if r["kind"] == "pool"}, [r for r in rows if r["kind"] == "case"]


def test_recall_on_the_labelled_corrections_stays_high(tmp_path: Path) -> None:
    """A guard on bench/bench_related.py's figure (recall@k 1.000 there; the old lookup 0.79)."""
    pools, cases = load_corrections()
    assert len(cases) >= 40
    by_pool: dict[str, list[Memory]] = {}
    for pid, pool in pools.items():
        root = tmp_path / pid
        for m in pool["memories"]:
            d = root / "memory" if m["scope"] == "global" else root / "projects" / pool["key"] / "memory"
            put(d, m["name"], m["description"], m["body"], m["type"])
        by_pool[pid] = (scan_dir(root / "memory", "global", None).memories
                        + scan_dir(root / "projects" / pool["key"] / "memory", "project", pool["key"]).memories)  # fmt: skip
    hits = {"tuning": 0, "holdout": 0}
    for c in cases:
        found = [f"{m.scope}:{m.name}" for m in rank(by_pool[c["pool"]], c["text"], prompt.RELATED_BODIES)]
        hits[c["split"]] += c["target"] in found
    for split, n in hits.items():
        total = sum(1 for c in cases if c["split"] == split)
        assert n / total >= 0.9, (split, n, total)


# -- the job: the correction lands -----------------------------------------------------------------


def correction_home(tmp_path: Path) -> Path:
    home = tmp_path / "h"
    shop(home)
    write_session(home / "projects" / KEY / f"{SID}.jsonl",
                  [("user", "we switched to poetry, uv is gone"), ("assistant", "Noted.")])  # fmt: skip
    ingest(home)
    return home


UPDATE = op(op="update", scope="project", name="uses-uv", type="project",
            description="Python dependencies are managed with poetry", body=POETRY_BODY,
            reason="the user said uv is gone")  # fmt: skip


def test_a_correction_of_a_memory_the_lookup_shows_lands_in_one_call(tmp_path: Path) -> None:
    home = correction_home(tmp_path)
    with FakeAnthropic([text("yes"), ops_reply(UPDATE)]) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url)
        r = run_job(ctx, extract, TARGET)
        (ask,) = strong(api)
    assert r.outcome == "ok" and r.details["applied"]["updated"] == 1, r
    assert "uv sync" in json.dumps(ask["messages"])  # the lookup showed `uses-uv` ("uv" is a word too)
    assert "poetry install" in (home / "projects" / KEY / "memory" / "uses-uv.md").read_text()


def test_a_correction_of_a_memory_the_model_was_not_shown_is_asked_again_and_lands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 13's case: the strong model updates `uses-uv` without having been shown it (here the
    lookup is made to miss it); memd fetches it, asks once more with its text, and the second
    answer's update lands. Exactly two strong calls."""
    home = correction_home(tmp_path)
    real = prompt._related

    def missing_uv(ctx: Any, key: str, said: str, limit: int) -> list[Memory]:
        return [m for m in real(ctx, key, said, limit) if m.name != "uses-uv"]

    monkeypatch.setattr(prompt, "_related", missing_uv)
    with FakeAnthropic([text("yes"), ops_reply(UPDATE), ops_reply(UPDATE)]) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url)
        r = run_job(ctx, extract, TARGET)
        first, second = strong(api)
        assert api.pending == 0
    assert "uv sync" not in json.dumps(first["messages"])
    retry = json.dumps(second["messages"])
    assert "uv sync" in retry and "Your previous answer" in retry and "[project] uses-uv" in retry
    assert r.outcome == "ok" and r.details["applied"] == {"added": 0, "updated": 1, "deleted": 0, "unchanged": 0,
                                                         "refused": 0}, r.details  # fmt: skip
    text_now = (home / "projects" / KEY / "memory" / "uses-uv.md").read_text()
    assert "poetry install" in text_now and "uv sync" not in text_now
    calls = [tuple(c) for c in ctx.conn.execute("SELECT job, ok FROM model_calls ORDER BY id")]
    assert calls == [("gate", 1), ("extract", 1), ("extract", 1)]
    assert "poetry" in (home / "projects" / KEY / "memory" / "MEMORY.md").read_text()


def test_an_unusable_second_answer_keeps_the_first_and_refuses_only_the_unseen_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = correction_home(tmp_path)
    real = prompt._related
    monkeypatch.setattr(prompt, "_related", lambda *a: [m for m in real(*a) if m.name != "uses-uv"])
    first = ops_reply(UPDATE, op(scope="project", name="poetry-lock-committed", type="project",
                                 description="poetry.lock is committed", body="Commit poetry.lock."))  # fmt: skip
    with FakeAnthropic([text("yes"), first, text("Sorry, I cannot answer in JSON.")]) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url)
        r = run_job(ctx, extract, TARGET)
        assert len(strong(api)) == 2
    assert r.outcome == "ok" and r.details["applied"]["added"] == 1 and r.details["applied"]["refused"] == 1
    assert "uv sync" in (home / "projects" / KEY / "memory" / "uses-uv.md").read_text()
    assert Home(home).project_memory(KEY).joinpath("poetry-lock-committed.md").exists()


def test_an_answer_deleting_every_memory_it_was_shown_loses_its_deletions(tmp_path: Path) -> None:
    """Issue 23: dream's whole-scope limit holds for an extraction answer too; its other operations stand."""
    home = correction_home(tmp_path)
    with FakeAnthropic([text("yes"), text("{}")]) as api:  # learn what the lookup shows
        run_job(context(home, make_settings(), fake_url=api.base_url), extract, TARGET)
    shown = {m.name for m in memories(home) if m.name in json.dumps(strong(api)[0]["messages"])}
    assert len(shown) >= 2
    home2 = correction_home(tmp_path / "again")
    deletes = [op(op="delete", scope="project" if n != "editor-neovim" else "global", name=n, reason="gone")
               for n in sorted(shown)]  # fmt: skip
    with FakeAnthropic([text("yes"), ops_reply(*deletes, op(name="uses-poetry", type="project"))]) as api:
        ctx = context(home2, make_settings(), fake_url=api.base_url)
        r = run_job(ctx, extract, TARGET)
    assert r.outcome == "ok", r
    assert r.details["applied"]["deleted"] == 0 and r.details["applied"]["added"] == 1, r.details
    assert shown <= {m.name for m in memories(home2)}
