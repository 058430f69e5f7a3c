"""Issue 21 point 2: the offline provider never drops a distinct fact.

"The same statement again" is decided on the statement's normalised text, never on the memory's
name: two facts whose first words agree ("the release branch is named rel-zt0011q" / "… rel-zt0003q",
every pair of "in this repo we always …" rules) become two memories with names of their own, and a
statement dropped as a true duplicate is logged naming the memory it duplicates. Through the real
job, transcripts, state database and write path."""

from __future__ import annotations

from pathlib import Path

from structlog.testing import capture_logs

from jobs import extract
from jobs.extract.offline import find_durable
from memd.job.runner import run_job
from memd.memory.scan import scan_dir
from memd.tree import Place
from tests.jobkit import context, ingest, make_settings, write_session

KEY = "-home-dev-app"
TS = "2026-11-20T10:00:00Z"


def _extract(home: Path, sid: str, said: list[str]) -> list[dict[str, object]]:
    """One session saying `said`, extracted offline; the log events of the run."""
    turns: list[tuple[str, str]] = []
    for text in said:
        turns += [("user", text), ("assistant", "Noted.")]
    write_session(home / "projects" / KEY / f"{sid}.jsonl", turns)
    ingest(home)
    ctx = context(home, make_settings(memd={"provider": "offline"}))
    try:
        with capture_logs() as logs:
            assert run_job(ctx, extract, Place.session(KEY, sid), force=True).outcome == "ok"
    finally:
        ctx.conn.close()
    return logs


def _project(home: Path) -> dict[str, str]:
    return {m.name: m.description for m in scan_dir(home / "projects" / KEY / "memory", "project", KEY).memories}


def test_two_release_branches_are_two_memories(tmp_path: Path) -> None:
    """On main the second was dropped: both were named after their first five words."""
    home = tmp_path / "home"
    _extract(home, "s1", ["Remember that the release branch of the mobile app is named rel-zt0011q."])
    _extract(home, "s2", ["Remember that the release branch of the mobile app is named rel-zt0003q."])
    got = _project(home)
    assert sorted(d.rstrip(".") for d in got.values()) == ["The release branch of the mobile app is named rel-zt0003q",
                                                          "The release branch of the mobile app is named rel-zt0011q"]
    assert len(set(got)) == 2


def test_each_pair_of_repo_rules_is_kept(tmp_path: Path) -> None:
    """Rules that share "in this repo we always …" and more, said in one session and across sessions."""
    home = tmp_path / "home"
    lead = "In this repo we always run the strict linter suite with warnings as errors"
    first = [f"{lead} before every commit.", f"{lead} before every push."]
    second = [f"{lead} before every release.", f"{lead} before every merge to main."]
    _extract(home, "s1", first)
    _extract(home, "s2", second)
    got = _project(home)
    assert len(got) == 4, got
    assert {d.rstrip(".") for d in got.values()} == {s.rstrip(".") for s in first + second}


def test_a_restatement_is_one_memory_and_a_log_line_naming_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _extract(home, "s1", ["Remember that the release branch of the mobile app is named rel-zt0011q."])
    [(name, _)] = _project(home).items()
    logs = _extract(home, "s2", ["remember that the  release branch of the mobile app is named `rel-zt0011q`!"])
    assert list(_project(home)) == [name]
    [dup] = [e for e in logs if e["event"] == "operation.duplicate"]
    assert dup["memory"] == f"project:{name}" and dup["file"].endswith(".md")


def test_a_statement_said_twice_in_one_span_is_kept_once_and_distinct_ones_never_share_a_name() -> None:
    lead = "In this repo we always run the strict linter suite with warnings as errors"
    said = [(f"{lead} before a commit.", TS), (f"{lead}  before a commit!", TS),
            (f"{lead} before a push. {lead} before a release.", TS)]  # fmt: skip
    found = find_durable(said)
    names = [f.name for f in found]
    assert len(found) == 3 and len(set(names)) == 3, names
    assert names == ["run-strict-linter-suite-warnings", "run-strict-linter-suite-push", "run-strict-linter-suite-release"]


def test_a_rule_that_names_its_project_goes_to_the_project(tmp_path: Path) -> None:
    """Issue 21: "in spotter we now always use Ecto.Multi …" became a global memory."""
    home = tmp_path / "home"
    key = "-home-dev-spotter"
    write_session(home / "projects" / key / "s1.jsonl",
                  [("user", "In spotter, always use Ecto.Multi for multi-step writes."), ("assistant", "OK."),
                   ("user", "In spotter we now always run mix format before committing."), ("assistant", "OK."),
                   ("user", "In Python, always use f-strings."), ("assistant", "OK.")])  # fmt: skip
    ingest(home)
    ctx = context(home, make_settings(memd={"provider": "offline"}))
    try:
        assert run_job(ctx, extract, Place.session(key, "s1"), force=True).outcome == "ok"
    finally:
        ctx.conn.close()
    proj = {m.description for m in scan_dir(home / "projects" / key / "memory", "project", key).memories}
    glob = {m.description for m in scan_dir(home / "memory", "global", None).memories}
    assert proj == {"In spotter, always use Ecto.Multi for multi-step writes.",
                    "In spotter we now always run mix format before committing."}, (proj, glob)  # fmt: skip
    assert glob == {"In Python, always use f-strings."}


def test_two_long_statements_with_the_same_cut_description_are_two_memories(tmp_path: Path) -> None:
    """A description is cut at 150 characters; the digest of the whole statement still tells them apart."""
    home = tmp_path / "home"
    lead = "Remember that the nightly export job of the billing service " + "writes its files to the shared bucket " * 4
    _extract(home, "s1", [lead + "under exports/daily."])
    _extract(home, "s2", [lead + "under exports/weekly."])
    got = _project(home)
    assert len(got) == 2 and len(set(got.values())) == 1, got
