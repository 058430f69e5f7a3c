"""Provenance (issue 13): an extracted memory carries where it came from in `metadata.sources` — the
session, the uuids of the user's records, the byte offsets where they end, the time of the first —
and an update keeps the earlier entries."""

from __future__ import annotations

import json
from pathlib import Path

from jobs import extract
from memd.job.runner import run_job
from memd.memory.scan import scan_dir
from memd.transcripts.spans import read_span
from memd.tree import Place
from tests.fakeapi import FakeAnthropic, op, ops_reply, text
from tests.jobkit import context, ingest, make_settings, write_session

KEY = "-work-app"
SID = "s1"
TARGET = Place.session(KEY, SID)


def line_ends(path: Path) -> list[int]:
    ends, pos = [], 0
    for line in path.read_bytes().splitlines(keepends=True):
        pos += len(line)
        ends.append(pos)
    return ends


def test_a_model_extracted_memory_carries_the_human_turns_of_its_span(tmp_path: Path) -> None:
    home = tmp_path / "h"
    path = home / "projects" / KEY / f"{SID}.jsonl"
    write_session(path, [("user", "We decided to use Postgres for billing."), ("assistant", "Noted."),
                         ("user", "[Request interrupted by user]"),
                         ("user", "And the invoices table is append-only."), ("assistant", "Ok.")])  # fmt: skip
    ingest(home)
    ends = line_ends(path)
    add = op(name="billing-postgres", type="project", description="billing uses Postgres",
             body="Postgres; the invoices table is append-only.")
    with FakeAnthropic([text("yes"), ops_reply(add)]) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url)
        assert run_job(ctx, extract, TARGET).outcome == "ok"
    [m] = scan_dir(home / "projects" / KEY / "memory", "project", KEY).memories
    # write_session gives record i the uuid "u<i>" and the time 10:00:<i>; the interruption marker is not the user's
    assert m.metadata["sources"] == [{"session": SID, "uuids": ["u0", "u3"], "offsets": [ends[0], ends[3]],
                                      "ts": "2026-11-29T10:00:00Z"}]  # fmt: skip
    # the offsets lead back to the user's own lines
    for off in m.metadata["sources"][0]["offsets"]:
        line = path.read_bytes()[:off].splitlines()[-1]
        assert json.loads(line)["type"] == "user"

    write_session(path, [("user", "Actually the invoices table may be updated by the nightly fix-up job."),
                         ("assistant", "Noted.")], start=5)  # fmt: skip
    ingest(home)
    update = op(op="update", name="billing-postgres", type="project", description="billing uses Postgres",
                body="Postgres; invoices are append-only except the nightly fix-up.")  # fmt: skip
    with FakeAnthropic([text("yes"), ops_reply(update)]) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url)
        assert run_job(ctx, extract, TARGET).outcome == "ok"
    [m] = scan_dir(home / "projects" / KEY / "memory", "project", KEY).memories
    assert [s["uuids"] for s in m.metadata["sources"]] == [["u0", "u3"], ["u5"]]  # merged, the first kept
    assert m.metadata["sources"][1]["ts"] == "2026-11-29T10:00:05Z"


def test_an_offline_memory_carries_the_turn_its_statement_came_from(tmp_path: Path) -> None:
    home = tmp_path / "h"
    path = home / "projects" / KEY / f"{SID}.jsonl"
    write_session(path, [("user", "hello there, can you look at the build?"), ("assistant", "Sure."),
                         ("user", "We decided to use Postgres for the billing service."), ("assistant", "Ok.")])  # fmt: skip
    ingest(home)
    ends = line_ends(path)
    ctx = context(home, make_settings(memd={"provider": "offline"}))
    assert run_job(ctx, extract, TARGET).outcome == "ok"
    [m] = scan_dir(home / "projects" / KEY / "memory", "project", KEY).memories
    assert m.metadata["sources"] == [{"session": SID, "uuids": ["u2"], "offsets": [ends[2]],
                                      "ts": "2026-11-29T10:00:02Z"}]  # fmt: skip


def test_spans_carry_the_record_uuid(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    write_session(path, [("user", "one"), ("assistant", "two")])
    pieces = read_span(path, 0, path.stat().st_size).pieces
    assert [(p.kind, p.uuid) for p in pieces] == [("human", "u0"), ("assistant", "u1")]
