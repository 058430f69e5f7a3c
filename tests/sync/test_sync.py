"""`memd sync` between two homes through a bare remote on local disk, with real git and real `memd` processes."""

from __future__ import annotations

import itertools
import json
import os
import time
from pathlib import Path

import pytest

from memd.errors import MemdError
from memd.git.worktree import IndexHold
from memd.history.runs import list_runs
from memd.index.hold import TEST_ENV
from memd.sync import run as sync
from memd.tree import Home, Place
from memd.write import proposals
from tests.procs import memd_env, run_memd
from tests.sync.helpers import (
    GIT_ENV,
    agent_session,
    bare_remote,
    git,
    hand_write,
    make_home,
    memd_write,
    memory_files,
    project_checkout,
    settings_of,
    text,
)

SECRET = "ANTHROPIC_API_KEY=sk-ant-api03-" + "Qw7" * 30


def cli_sync(home: Home, host: str) -> dict:
    r = run_memd(home.root, "sync", "--json", env=memd_env(**GIT_ENV, MEMD_HOST=host))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def in_sync(home: Home, host: str, monkeypatch: pytest.MonkeyPatch, hold: IndexHold | None = None) -> dict:
    monkeypatch.setenv("MEMD_HOST", host)
    return sync.run(home, settings_of(home), hold=hold)


def remote_head(remote: Path) -> str:
    return git("--git-dir", str(remote), "rev-parse", "main").strip()


def no_markers(*homes: Home) -> None:
    for h in homes:
        for p in h.root.rglob("*.md"):
            assert "<<<<<<<" not in p.read_text() and ">>>>>>>" not in p.read_text(), p


def test_memories_created_on_each_side_converge_and_nothing_is_forced(tmp_path: Path) -> None:
    remote = bare_remote(tmp_path)
    a, b = make_home(tmp_path, "a", remote), make_home(tmp_path, "b", remote)
    memd_write(a, None, "tabs.md", text("tabs", "Use tabs."))
    memd_write(b, None, "tests-race.md", text("tests-race", "Run the tests with -race."))
    heads = []
    for home, host in ((a, "laptop"), (b, "desk"), (a, "laptop")):
        cli_sync(home, host)
        heads.append(remote_head(remote))
    assert memory_files(a, None) == memory_files(b, None)
    assert set(memory_files(a, None)) == {"tabs.md", "tests-race.md"}
    # the remote only ever moved forward
    for old, new in itertools.pairwise(heads):
        git("--git-dir", str(remote), "merge-base", "--is-ancestor", old, new)
    # both indexes follow
    assert "tests-race" in (a.global_memory / "MEMORY.md").read_text()
    # a write on one side reaches the other, deletions too
    memd_write(b, None, "tabs.md", None, job="forget", reason="memd forget tabs")
    cli_sync(b, "desk")
    cli_sync(a, "laptop")
    assert set(memory_files(a, None)) == {"tests-race.md"}
    for h in (a, b):
        assert git("--git-dir", str(h.memd_dir / "git"), "rev-parse", "main").strip() == remote_head(remote)
    git("--git-dir", str(remote), "fsck", "--strict")


def test_the_same_repository_at_two_paths_shares_its_project_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    remote = bare_remote(tmp_path)
    a, b = make_home(tmp_path, "a", remote), make_home(tmp_path, "b", remote)
    laptop = project_checkout(tmp_path, "laptop/src/webshop", "git@github.com:Acme/webshop.git")
    desk = project_checkout(tmp_path, "desk/work/shop-clone", "https://me@GitHub.com/Acme/webshop")
    ka, kb = agent_session(a, laptop), agent_session(b, desk)
    assert ka != kb
    memd_write(a, ka, "deploy-fridays.md", text("deploy-fridays", "We deploy only on Fridays.", "project"))
    in_sync(a, "laptop", monkeypatch)
    in_sync(b, "desk", monkeypatch)
    assert memory_files(b, kb) == memory_files(a, ka)
    memd_write(b, kb, "migrations.md", text("migrations", "Migrations need a review.", "project"))
    in_sync(b, "desk", monkeypatch)
    in_sync(a, "laptop", monkeypatch)
    assert set(memory_files(a, ka)) == {"deploy-fridays.md", "migrations.md"}
    manifest = json.loads(git("--git-dir", str(remote), "show", "main:manifest.json"))
    (entry,) = manifest["projects"].values()
    assert entry == {"identity": "github.com/Acme/webshop", "keys": {"laptop": ka, "desk": kb}}


def test_a_project_unknown_here_waits_in_the_repository_until_a_checkout_appears(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    remote = bare_remote(tmp_path)
    a, b = make_home(tmp_path, "a", remote), make_home(tmp_path, "b", remote)
    ka = agent_session(a, project_checkout(tmp_path, "laptop/api", "git@example.org:team/api.git"))
    memd_write(a, ka, "auth.md", text("auth", "Tokens expire after an hour.", "project"))
    in_sync(a, "laptop", monkeypatch)
    in_sync(b, "desk", monkeypatch)
    assert list(b.projects.iterdir()) == []
    # a local note in B's new checkout before it ever synced: both kept
    kb = agent_session(b, project_checkout(tmp_path, "desk/code/api", "https://example.org/team/api"))
    memd_write(b, kb, "ci.md", text("ci", "CI runs on every push.", "project"))
    in_sync(b, "desk", monkeypatch)
    assert set(memory_files(b, kb)) == {"auth.md", "ci.md"}
    in_sync(a, "laptop", monkeypatch)
    assert set(memory_files(a, ka)) == {"auth.md", "ci.md"}


def test_concurrent_edits_keep_both_versions_and_make_one_merge_proposal(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    remote = bare_remote(tmp_path)
    a = make_home(tmp_path, "a", remote)
    b = make_home(tmp_path, "b", remote)
    for h in (a, b):
        s = json.loads(h.settings_file.read_text())
        s["memory"] = {"review": True}
        h.settings_file.write_text(json.dumps(s))
    memd_write(a, None, "tabs.md", text("tabs", "Use tabs."))
    in_sync(a, "laptop", monkeypatch)
    in_sync(b, "desk", monkeypatch)
    mine = text("tabs", "Use tabs. Even in YAML.", updated="2026-03-01T00:00:00Z")
    theirs = text("tabs", "Use tabs, width 4.", updated="2026-03-02T00:00:00Z")
    monkeypatch.setenv("MEMD_HOST", "laptop")
    memd_write(a, None, "tabs.md", mine)
    monkeypatch.setenv("MEMD_HOST", "desk")
    memd_write(b, None, "tabs.md", theirs)
    in_sync(a, "laptop", monkeypatch)
    r = in_sync(b, "desk", monkeypatch)
    assert [c["kind"] for c in r["conflicts"]] == ["changed-both"]
    in_sync(a, "laptop", monkeypatch)
    for h in (a, b):
        assert memory_files(h, None) == {"tabs.conflict-laptop.md": mine.encode(), "tabs.md": theirs.encode()}
    no_markers(a, b)
    waiting = proposals.list_proposals(b) + proposals.list_proposals(a)
    assert len(waiting) == 1
    (p,) = waiting
    assert p.info["job"] == "sync" and {c["file"] for c in p.info["changes"]} == {"tabs.md", "tabs.conflict-laptop.md"}
    # the conflict is in memd's history on the machine that merged

    runs = [r for r in list_runs(b) if r.get("job") == "sync"]
    assert runs and "kept both versions of tabs.md" in runs[-1]["reason"]


def test_the_same_name_created_twice_is_renamed_not_overwritten(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    remote = bare_remote(tmp_path)
    a, b = make_home(tmp_path, "a", remote), make_home(tmp_path, "b", remote)
    monkeypatch.setenv("MEMD_HOST", "laptop")
    memd_write(a, None, "editor.md", text("editor", "Uses vim."))
    monkeypatch.setenv("MEMD_HOST", "desk")
    memd_write(b, None, "editor.md", text("editor", "Uses helix."))
    in_sync(a, "laptop", monkeypatch)
    in_sync(b, "desk", monkeypatch)
    in_sync(a, "laptop", monkeypatch)
    for h in (a, b):
        assert memory_files(h, None) == {"editor-laptop.md": text("editor", "Uses vim.").encode(),
                                         "editor.md": text("editor", "Uses helix.").encode()}  # fmt: skip


def test_an_edit_wins_over_a_deletion_on_the_other_side(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    remote = bare_remote(tmp_path)
    a, b = make_home(tmp_path, "a", remote), make_home(tmp_path, "b", remote)
    memd_write(a, None, "x.md", text("x", "one"))
    in_sync(a, "laptop", monkeypatch)
    in_sync(b, "desk", monkeypatch)
    memd_write(a, None, "x.md", None)
    memd_write(b, None, "x.md", text("x", "two"))
    in_sync(a, "laptop", monkeypatch)
    r = in_sync(b, "desk", monkeypatch)
    in_sync(a, "laptop", monkeypatch)
    assert memory_files(a, None) == memory_files(b, None) == {"x.md": text("x", "two").encode()}
    assert r["conflicts"][0]["kind"] == "kept-changed"


def test_a_planted_secret_never_leaves_the_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    remote = bare_remote(tmp_path)
    a, b = make_home(tmp_path, "a", remote), make_home(tmp_path, "b", remote)
    memd_write(a, None, "clean.md", text("clean", "Nothing to hide."))
    hand_write(a, None, "creds.md", text("creds", f"prod: {SECRET}"))
    in_sync(a, "laptop", monkeypatch)
    in_sync(b, "desk", monkeypatch)
    assert "sk-ant-api03" not in git("--git-dir", str(remote), "log", "-p", "--all")
    assert set(memory_files(b, None)) == {"clean.md"}
    st = sync.status(a, settings_of(a))
    assert [Path(r["file"]).name for r in st["refused"]] == ["creds.md"]
    assert "not committed" in sync.render_status(st)
    # another machine's change to that name never overwrites the local (refused) version
    monkeypatch.setenv("MEMD_HOST", "desk")
    memd_write(b, None, "creds.md", text("creds", "ask the vault"))
    in_sync(b, "desk", monkeypatch)
    in_sync(a, "laptop", monkeypatch)
    assert SECRET in (a.global_memory / "creds.md").read_text()
    assert (a.global_memory / "creds.conflict-desk.md").read_text() == text("creds", "ask the vault")


def test_an_unreachable_remote_backs_off_local_work_goes_on_and_status_shows_the_distance(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    remote = tmp_path / "later.git"
    a = make_home(tmp_path, "a", remote)
    memd_write(a, None, "one.md", text("one", "1"))
    with pytest.raises(MemdError, match="unreachable"):
        in_sync(a, "laptop", monkeypatch)
    memd_write(a, None, "two.md", text("two", "2"))  # local work goes on, committed
    st = sync.status(a, settings_of(a))
    assert st["failures"] == 1 and st["next_try"] and "unreachable" in st["last_error"]
    assert st["ahead"] == 2 and st["behind"] == 0
    state = sync.read_state(a)
    assert not sync.due(state["last_attempt_ts"] + 5, state, 900, ahead=True)  # backing off
    r = run_memd(a.root, "status", env=memd_env(**GIT_ENV))
    assert "2 ahead / 0 behind" in r.stdout and "failing" in r.stdout
    bare_remote(tmp_path, "later.git")
    in_sync(a, "laptop", monkeypatch)
    st = sync.status(a, settings_of(a))
    assert st["failures"] == 0 and st["last_error"] is None and (st["ahead"], st["behind"]) == (0, 0)
    b = make_home(tmp_path, "b", remote)
    memd_write(b, None, "three.md", text("three", "3"))
    in_sync(b, "desk", monkeypatch)
    git("--git-dir", str(a.memd_dir / "git"), "fetch", "-q", "origin")
    assert sync.status(a, settings_of(a))["behind"] == 2  # B's write and its merge


def test_sync_needs_git_on_and_a_remote(tmp_path: Path) -> None:
    off = make_home(tmp_path, "off", None, git=False)
    r = run_memd(off.root, "sync", env=memd_env(**GIT_ENV))
    assert r.returncode == 5 and "memd.git is off" in r.stderr
    local = make_home(tmp_path, "local", None)
    hand_write(local, None, "a.md", text("a", "one"))
    r = run_memd(local.root, "sync", env=memd_env(**GIT_ENV))
    assert r.returncode == 5 and "memd.sync.remote is not set" in r.stderr
    assert "global/a.md" in git("--git-dir", str(local.memd_dir / "git"), "ls-tree", "-r", "--name-only", "main")


def test_a_push_refused_because_the_remote_moved_is_merged_again_never_forced(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    remote = bare_remote(tmp_path)
    a, b = make_home(tmp_path, "a", remote), make_home(tmp_path, "b", remote)
    memd_write(a, None, "a.md", text("a", "from the laptop"))
    memd_write(b, None, "b.md", text("b", "from the desk"))
    real_push = sync._push
    calls: list[str] = []

    def racing_push(repo: object, url: str) -> str:  # B pushes between A's merge and A's push, once
        if not calls:
            calls.append("")
            monkeypatch.setenv("MEMD_HOST", "desk")
            sync.run(b, settings_of(b))
            calls[0] = remote_head(remote)
            monkeypatch.setenv("MEMD_HOST", "laptop")
        return real_push(repo, url)  # type: ignore[arg-type]

    monkeypatch.setattr(sync, "_push", racing_push)
    monkeypatch.setenv("MEMD_HOST", "laptop")
    r = sync.run(a, settings_of(a))
    assert r["rounds"] == 2 and r["pushed"]
    monkeypatch.setattr(sync, "_push", real_push)
    in_sync(b, "desk", monkeypatch)
    assert memory_files(a, None) == memory_files(b, None) == {"a.md": text("a", "from the laptop").encode(),
                                                              "b.md": text("b", "from the desk").encode()}  # fmt: skip
    git("--git-dir", str(remote), "merge-base", "--is-ancestor", calls[0], "main")  # B's push was kept, not forced over


def test_a_kill_between_setting_the_remotes_url_and_its_refspec_does_not_break_every_later_sync(
        tmp_path: Path) -> None:  # fmt: skip
    """tests/sync/test_kill.py found it: a `kill -9` after `remote.origin.url` was written and before
    `remote.origin.fetch` was left the URL without a refspec; later syncs saw the URL right and never
    wrote the refspec, so `fetch` filled only FETCH_HEAD and every push was refused as non-fast-forward
    ("the remote kept moving … (4 rounds)") although nothing moved."""
    remote = bare_remote(tmp_path)
    a, b = make_home(tmp_path, "a", remote), make_home(tmp_path, "b", remote)
    memd_write(a, None, "a.md", text("a", "from the laptop"))
    cli_sync(a, "laptop")
    git("--git-dir", str(a.memd_dir / "git"), "config", "--unset-all", "remote.origin.fetch")  # the kill's state
    memd_write(b, None, "b.md", text("b", "from the desk"))
    cli_sync(b, "desk")
    memd_write(a, None, "a2.md", text("a2", "again from the laptop"))
    got = cli_sync(a, "laptop")
    assert got["pushed"] and got["rounds"] == 1
    assert set(memory_files(a, None)) == {"a.md", "a2.md", "b.md"}
    assert git("--git-dir", str(a.memd_dir / "git"), "config", "--get-all", "remote.origin.fetch").split() == [
        "+refs/heads/*:refs/remotes/origin/*"]


def test_of_two_checkouts_of_one_repository_on_one_machine_one_is_synced_and_nothing_is_lost(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    remote = bare_remote(tmp_path)
    a = make_home(tmp_path, "a", remote)
    k1 = agent_session(a, project_checkout(tmp_path, "one/shop", "git@github.com:acme/shop.git"))
    k2 = agent_session(a, project_checkout(tmp_path, "two/shop", "git@github.com:acme/shop.git"), "s2")
    memd_write(a, k1, "x.md", text("x", "first checkout", "project"))
    memd_write(a, k2, "y.md", text("y", "second checkout", "project"))
    in_sync(a, "laptop", monkeypatch)
    in_sync(a, "laptop", monkeypatch)
    files = git("--git-dir", str(remote), "ls-tree", "-r", "--name-only", "main").split()
    # the first checkout is the one synced; the second keeps its memory here, untouched, and status says so
    assert {f.rsplit("/", 1)[1] for f in files if f.startswith("projects/")} == {"x.md"}
    assert set(memory_files(a, k1)) == {"x.md"} and set(memory_files(a, k2)) == {"y.md"}
    st = sync.status(a, settings_of(a))
    assert st["not_synced"] == [{"key": k2, "identity": "github.com/acme/shop", "synced_key": k1}]


def test_the_daemons_sync_leaves_a_projects_memory_md_to_an_agent_at_work_and_a_persons_does_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A memory pulled in while Claude Code works in the project: the daemon's sync writes the memory file
    at once but hands the MEMORY.md rewrite to the index job (`memd.index.hold`), so the agent's
    Read-then-Edit of MEMORY.md is not broken; `memd sync` typed by a person writes it at once. On main
    the daemon's sync rewrote MEMORY.md under the agent."""
    monkeypatch.delenv(TEST_ENV, raising=False)  # the suite's daemons write at once; this test asks for the hold
    remote = bare_remote(tmp_path)
    a, b = make_home(tmp_path, "a", remote), make_home(tmp_path, "b", remote, agentQuietSeconds=30)
    ka = agent_session(a, project_checkout(tmp_path, "laptop/shop", "git@example.org:team/shop.git"))
    kb = agent_session(b, project_checkout(tmp_path, "desk/shop", "git@example.org:team/shop.git"))
    transcript = b.projects / kb / "s1.jsonl"
    os.utime(transcript, (time.time() - 3600, time.time() - 3600))  # nobody at work yet
    memd_write(a, ka, "deploy-fridays.md", text("deploy-fridays", "We deploy only on Fridays.", "project"))
    in_sync(a, "laptop", monkeypatch)
    held: list[tuple[Place, float]] = []
    in_sync(b, "desk", monkeypatch, hold=lambda p, s: held.append((p, s)))
    index_md = Place.project(kb).memory_dir(b) / "MEMORY.md"
    before = index_md.read_bytes()
    assert b"deploy-fridays" in before and held == []

    memd_write(a, ka, "migrations.md", text("migrations", "Migrations need a review.", "project"))
    in_sync(a, "laptop", monkeypatch)
    transcript.touch()  # the agent's turn: its transcript just moved
    in_sync(b, "desk", monkeypatch, hold=lambda p, s: held.append((p, s)))
    assert set(memory_files(b, kb)) == {"deploy-fridays.md", "migrations.md"}  # the memory is here at once
    assert index_md.read_bytes() == before  # MEMORY.md waits for the agent
    [(place, seconds)] = held
    assert place == Place.project(kb) and 0 < seconds <= 30

    memd_write(a, ka, "code-review.md", text("code-review", "Two approvals before a merge.", "project"))
    in_sync(a, "laptop", monkeypatch)
    in_sync(b, "desk", monkeypatch)  # a person's `memd sync`: no hold
    after = index_md.read_text()
    assert "migrations" in after and "code-review" in after
