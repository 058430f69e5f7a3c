"""Issue 23 end to end: a secret in a format the rules did not know, said in a session, never reaches the
model's request (the real `anthropic` client against tests/fakeapi.py), a memory file, MEMORY.md, the
drawer render or the search database; and `memd remember` (a real process, git on) never derives a file
name or a commit subject from a text holding a token no rule knows."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from jobs import extract
from memd.job.runner import run_job
from memd.tree import Place
from tests.fakeapi import FakeAnthropic, op, ops_reply, text
from tests.jobkit import context, ingest, make_settings, write_session
from tests.jobs.extract.test_secrets import everything_derived
from tests.sync.conftest import git_identity
from tests.write.kit import cli_json, settings

__all__ = ["git_identity"]  # the sync tests' git identity, never the machine's

KEY = "-work-vault"
SID = "s1"
PW = "Xq7#pL9m2Vkw"
GHP = "ghp_" + "R8kq2Vx7Lm4Tz9Wc3Hn6Bd1Fy5Js0Pg8Ku2A"

# (what the user says or a tool printed, the secret's fragments that may appear nowhere)
SAID = {
    "zh-password": (f"Please remember this for every deploy of the staging database: 我们的测试数据库密码是 {PW}，以后部署都用它。", ["xq7#pl9m2vkw", "xq7", "pl9m2vkw"]),
    "wrapped-github": (f"Always deploy the staging database with the token the terminal printed here:\n{GHP[:23]}\n{GHP[23:]}\n", [GHP[4:23].lower(), GHP[23:].lower()]),
    "ansi-glpat": ("Always deploy the staging database with the CI token \x1b[32mglpat-xYz0123456\x1b[1m78901234AbC\x1b[0m for deploys.",
                   ["xyz0123456", "78901234abc"]),
}


@pytest.mark.parametrize("case", sorted(SAID))
def test_a_secret_in_a_new_format_reaches_no_request_file_index_or_search_row(tmp_path: Path, case: str) -> None:
    said, fragments = SAID[case]
    home = tmp_path / "h"
    write_session(home / "projects" / KEY / f"{SID}.jsonl", [("user", said), ("assistant", "Noted.")])
    ingest(home)
    answer = ops_reply(  # a model that repeats what it was shown: it was shown the redacted text
        op(scope="global", name="deploy-credential", type="feedback", description="deploys use the saved credential",
           body="Deploys use the credential the user gave. **Why:** said so."),
    )
    with FakeAnthropic([text("yes"), answer]) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url)
        r = run_job(ctx, extract, Place.session(KEY, SID))
        sent = "\n".join(json.dumps(req, ensure_ascii=False) for req in api.requests).lower()
    assert r.outcome == "ok" and api.requests, r
    assert "[redacted:" in sent  # the transcript span reached the model, redacted
    derived = everything_derived(home)
    assert derived
    for frag in fragments:
        assert frag not in sent, frag
        assert frag not in derived, frag


def _git(home: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(home / "memd" / "git"), *args], capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.parametrize("said", [
    "我们的测试数据库密码是 xq7pl9mz2vkw",  # the text: the password word is known now
    "测试数据库的东西记一下 xq7pl9mz2vkw",  # no word any rule knows: the token still names nothing
])
def test_remember_names_no_file_and_no_commit_after_a_token(tmp_path: Path, said: str) -> None:
    home = tmp_path / "h"
    settings(home, memd={"git": True})
    r = cli_json(home, "remember", said, "--project", KEY)
    assert r["status"] == "added", r
    assert "xq7pl9mz2vkw" not in r["file"] and "xq7pl9mz2vkw" not in r["name"]
    names = [p.name for p in (home / "projects" / KEY / "memory").iterdir()] + [p.name for p in (home / "memory").glob("*")]
    assert not any("xq7pl9mz2vkw" in n for n in names), names
    subjects = _git(home, "log", "--format=%s%n%b", "main")
    assert "remember" in subjects and "xq7pl9mz2vkw" not in subjects, subjects
    assert "xq7pl9mz2vkw" not in _git(home, "ls-tree", "-r", "--name-only", "main")
    index = (home / "projects" / KEY / "memory" / "MEMORY.md").read_text() if r["scope"] == "project" else \
        (home / "memory" / "MEMORY.md").read_text()
    assert "xq7pl9mz2vkw" not in index.split("(")[0]
