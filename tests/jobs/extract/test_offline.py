"""The offline provider judged on labelled statements, and the misfires issue 13 reported: questions kept
as memories, "in every project" filed under the project, the sample's project rules sent to the drawer,
and each memory saying its sentence twice."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from jobs import extract
from jobs.extract.offline import find_durable, has_durable, offline_operations
from memd.job.runner import run_job
from memd.memory.scan import scan_dir
from memd.transcripts.spans import Piece
from memd.tree import Place
from tests.jobkit import context, ingest, make_settings

LABELS = Path(__file__).resolve().parents[2] / "data" / "offline_labels.jsonl"
SAMPLE = Path(__file__).resolve().parents[3] / "memd" / "sample_home"
TS = "2026-11-20T10:00:00Z"


def rows() -> list[dict[str, Any]]:
    return [json.loads(x) for x in LABELS.read_text(encoding="utf-8").splitlines() if x.strip()]


def test_the_labelled_set_meets_the_goal() -> None:
    """bench/bench_offline.py's figures, kept: precision ≥ 0.9 and recall ≥ 0.7, on the whole set and on
    the statements written after the rules were frozen; scope right for ≥ 0.9 of what is kept."""
    data = rows()
    assert len(data) >= 150
    for part in ("all", "holdout"):
        sub = [r for r in data if part == "all" or r["split"] == part]
        kept = [r for r in sub if has_durable([(r["text"], TS)])]
        tp = [r for r in kept if r["durable"]]
        precision, recall = len(tp) / len(kept), len(tp) / sum(r["durable"] for r in sub)
        assert precision >= 0.9 and recall >= 0.7, (part, precision, recall)
        scoped = sum(all(f.scope == r["scope"] for f in find_durable([(r["text"], TS)])) for r in tp)
        assert scoped / len(tp) >= 0.9, (part, scoped, len(tp))


@pytest.mark.parametrize("question", [
    "What should I keep in mind when I work here?",
    "Is there anything I should remember about this codebase?",
    "Do you remember what we decided about the cart API?",
    "Should we always run the migrations first?",
    "Do you prefer tabs or spaces?",
    "Remind me, do we deploy on Fridays or Mondays?",
    "What's our policy on force pushes?",
    "Keep in mind anything special about the build here?",
    "Any conventions I should keep in mind before I start?",
])  # fmt: skip
def test_a_question_is_never_a_memory(question: str) -> None:
    """Issue 13: 9 of 9 such prompts were kept, one as a global `user` memory."""
    assert not has_durable([(question, TS)]) and find_durable([(question, TS)]) == []


@pytest.mark.parametrize("said", ["I prefer short answers, in every project.",
                                  "Remember: I prefer short answers, in every project."])  # fmt: skip
def test_in_every_project_is_global_whatever_else_is_said(said: str) -> None:
    [f] = find_durable([(said, TS)])
    assert f.scope == "global" and f.type == "user", f


def test_a_turn_that_asks_not_to_be_remembered_keeps_nothing() -> None:
    said = "My personal password manager is 1Password and I always use the staging account — don't remember this."
    assert find_durable([(said, TS)]) == []


def test_description_and_body_do_not_repeat_each_other() -> None:
    for said in ("Never commit directly to main; always open a PR, even for one-line fixes.",
                 "Please always run the tests with -race in this repo; we had data races slip through before.",
                 "I prefer concise explanations without long preambles."):  # fmt: skip
        [f] = find_durable([(said, TS)])
        assert f.description not in f.body and f.description.rstrip(".") not in f.body, f
    [f] = find_durable([("Never commit directly to main; always open a PR, even for one-line fixes.", TS)])
    assert f.description == "Never commit directly to main"
    assert f.body.startswith("Always open a PR, even for one-line fixes.") and "(2026-11-20)" in f.body


def test_offline_operations_carry_the_turn_they_came_from() -> None:
    pieces = [Piece("human", "We decided to use Postgres for the billing service.", 120, "2026-11-29T10:00:00Z", uuid="u0"),
              Piece("assistant", "Noted.", 240, "2026-11-29T10:00:01Z", uuid="a0"),
              Piece("human", "thanks!", 300, "2026-11-29T10:00:02Z", uuid="u1"),
              Piece("human", "I prefer short answers, in every project.", 420, "2026-11-29T10:00:03Z", uuid="u2")]  # fmt: skip
    ops, union = offline_operations(pieces, "s1")
    assert [(o.scope, o.sources[0]["uuids"]) for o in ops] == [("project", ["u0"]), ("global", ["u2"])]
    assert ops[0].sources[0] == {"session": "s1", "uuids": ["u0"], "offsets": [120], "ts": "2026-11-29T10:00:00Z"}
    assert union == [{"session": "s1", "uuids": ["u0", "u2"], "offsets": [120, 420], "ts": "2026-11-29T10:00:00Z"}]


def test_the_sample_home_files_project_rules_under_the_project(tmp_path: Path) -> None:
    """On the bundled sample (what `memd demo` shows): the webshop's rules go to its project memory,
    the user's own way of working to the drawer, nothing said while paused, no chit-chat.
    Changed expectation (the old one was the misfire): "Never commit directly to main; always open a
    PR" and the correction "No, don't return 400 there" were global feedback memories."""
    home = tmp_path / "home"
    shutil.copytree(SAMPLE, home)
    ingest(home)
    key = "-home-dev-webshop"
    for sid in ("6d1f0c2e-1b7a-4c55-9a0e-5b8f3e2d4a10", "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d",
                "0b9e7c44-2a61-4f0e-8d3c-7c1d2e3f4a5b"):  # fmt: skip
        ctx = context(home, make_settings(memd={"provider": "offline"}))
        try:
            assert run_job(ctx, extract, Place.session(key, sid)).outcome in ("ok", "skipped")
        finally:
            ctx.conn.close()
    shipped = {"never-commit-to-main", "pr-for-every-change"}  # the sample's own drawer notes (its demo dream merges them)
    glob = {m.name: m for m in scan_dir(home / "memory", "global", None).memories if m.name not in shipped}
    proj = {m.name: m for m in scan_dir(home / "projects" / key / "memory", "project", key).memories}
    assert sorted(glob) == ["mostly-backend-person-touch-react"], sorted(glob)
    # Names without the words that only say how a rule was made ("always", "repo"; issue 21).
    assert sorted(proj) == ["decided-empty-cart-422-json", "deploy-only-fridays-migrations-must",
                            "never-commit-directly-main", "run-tests-race", "staging-board"]  # fmt: skip
    assert proj["staging-board"].type == "reference" and proj["never-commit-directly-main"].type == "feedback"
    everything = "\n".join(p.read_text() for p in home.rglob("*.md"))
    assert "1Password" not in everything and "alice@example.com" not in everything


@pytest.mark.parametrize("part", ["offline_heldout_21.jsonl", "offline_tune_21.jsonl"])
def test_issue_21_statements_meet_the_goal(part: str) -> None:
    """bench/bench_offline_21.py's figures, kept: on issue 21's held-out statements (never looked at while the
    rules were tuned) and its tuning part, precision ≥ 0.9, recall ≥ 0.7, and every memory kept of a
    durable held-out statement in its labelled scope; a Chinese statement's memory is in Chinese."""
    data = [json.loads(x) for x in (LABELS.parent / part).read_text(encoding="utf-8").splitlines() if x.strip()]
    kept = [r for r in data if has_durable([(r["text"], TS)])]
    tp = [r for r in kept if r["durable"]]
    precision, recall = len(tp) / len(kept), len(tp) / sum(r["durable"] for r in data)
    assert precision >= 0.9 and recall >= 0.7, (precision, recall)
    wrong = [r["text"] for r in tp if any(f.scope != r["scope"] for f in find_durable([(r["text"], TS)]))]
    assert len(wrong) <= (0 if "heldout" in part else 2), wrong
    for r in tp:
        if r["lang"] == "zh":
            assert all("**为什么：**" in f.body for f in find_durable([(r["text"], TS)])), r["text"]
