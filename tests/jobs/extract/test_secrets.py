"""No secret said in a session reaches a file name, MEMORY.md, the drawer render or a search row
(issue 13: a GitHub token planted in a durable statement became a memory's file name; the body was
redacted, the name was built from the raw sentence). Offline, names and descriptions come from
redacted text; a model's answer is untrusted, so a name carrying a secret — raw, or slugged beyond
what the detectors see — is refused, and descriptions and bodies are redacted."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from jobs import extract
from memd.job.runner import run_job
from memd.tree import Home, Place
from tests.fakeapi import FakeAnthropic, op, ops_reply, text
from tests.jobkit import context, ingest, make_settings, write_session

KEY = "-work-vault"
SID = "s1"

# Planted formats, built at run time so no scanner flags this file. Each is random-looking, as real ones are.
PLANTED = {
    "github": "ghp_" + "R8kq2Vx7Lm4Tz9Wc3Hn6Bd1Fy5Js0Pg8Ku2A",
    "anthropic": "sk-ant-" + "api03-" + "Qw3rTy7uIo9pAs2dFg4hJk6lZx8cVb1nM0qW5eR7tY9uI3oP6aS8dF2gH4jK6lZ1xC3vB5nM7qW9eR0tY2uI4oP6aS8dFgAA",
    "aws": "AKIA" + "Q7W3E9R2T5Y8U1I4",
    "slack": "xoxb-" + "284756193027-4938271650294-" + "k3J9dLq2Wm7Xv4Zr8Tn1Bp6Y",
    "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9" + "." + "eyJzdWIiOiI4ODQyMTciLCJyb2xlIjoiZGVwbG95In0" + "."
           + "q7Lw2Vn9Xc4Tz8Rb3Hm6Kd1Fs5Gj0Py2Ua7Ne4Wq9",
}


def fragments(secret: str) -> list[str]:
    """What of a secret may not appear anywhere, in any case: every long run of its letters and digits
    (a slug keeps those, lower-cased)."""
    return [run.lower() for run in re.findall(r"[A-Za-z0-9]{10,}", secret)]


def everything_derived(home: Path) -> str:
    """File names and text of every memory, MEMORY.md and drawer render, and every search row."""
    h = Home(home)
    parts = []
    for p in sorted(home.rglob("*")):
        if p.is_file() and p.suffix == ".md":
            parts += [p.name, p.read_text(encoding="utf-8", errors="replace")]
    if h.search_db.exists():
        conn = sqlite3.connect(h.search_db)
        try:
            parts += [" ".join(map(str, row)) for row in conn.execute("SELECT * FROM memories")]
            parts += [" ".join(map(str, row)) for row in conn.execute("SELECT * FROM memories_fts")]
        finally:
            conn.close()
    return "\n".join(parts).lower()


def assert_clean(home: Path, secret: str) -> None:
    haystack = everything_derived(home)
    assert haystack, "nothing was written"
    for frag in fragments(secret):
        assert frag not in haystack, frag


@pytest.mark.parametrize("fmt", sorted(PLANTED))
def test_offline_extraction_derives_nothing_from_a_secret(tmp_path: Path, fmt: str) -> None:
    secret = PLANTED[fmt]
    home = tmp_path / "h"
    said = [f"Always use {secret} as the CI token for deploys.",
            f"Remember: my personal token is {secret}, I prefer it in every project."]  # fmt: skip
    write_session(home / "projects" / KEY / f"{SID}.jsonl", [("user", said[0]), ("assistant", "Noted."),
                                                             ("user", said[1]), ("assistant", "Ok.")])  # fmt: skip
    ingest(home)
    ctx = context(home, make_settings(memd={"provider": "offline"}))
    r = run_job(ctx, extract, Place.session(KEY, SID))
    assert r.outcome == "ok" and r.details["applied"]["added"] == 2, r
    assert Home(home).drawer_render.exists() and (home / "projects" / KEY / "memory" / "MEMORY.md").exists()
    assert_clean(home, secret)
    assert "[redacted:" in everything_derived(home)  # the memories say something was there


@pytest.mark.parametrize("fmt", sorted(PLANTED))
def test_a_model_answer_carrying_a_secret_is_cleaned_or_refused(tmp_path: Path, fmt: str) -> None:
    secret = PLANTED[fmt]
    home = tmp_path / "h"
    write_session(home / "projects" / KEY / f"{SID}.jsonl",
                  [("user", f"Always use {secret} as the CI token for deploys."), ("assistant", "Noted.")])  # fmt: skip
    ingest(home)
    slugged = re.sub(r"[^a-z0-9]+", "-", secret.lower()).strip("-")
    answer = ops_reply(
        op(name=f"token {secret}", description="the CI token"),  # a raw secret in a name: refused
        op(name=f"ci-token-{slugged}"[:190], description="the CI token"),  # slugged: refused
        op(scope="global", name="ci-token-feedback", type="feedback", description=f"use {secret} in CI",
           body=f"The token is {secret}. **Why:** said so."),  # description and body: redacted
        op(name="deploy-token-in-ci", description="deploys read the token from CI", body="Kept."),
    )
    with FakeAnthropic([text("yes"), answer]) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url)
        r = run_job(ctx, extract, Place.session(KEY, SID))
        sent = "\n".join(str(req) for req in api.requests).lower()
    assert r.outcome == "ok" and r.details["applied"]["added"] == 2 and r.details["rejected"] == 2, r.details
    assert all(frag not in sent for frag in fragments(secret))  # the model never saw it either
    assert_clean(home, secret)
