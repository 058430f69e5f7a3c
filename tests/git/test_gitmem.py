"""Git-backed memory: one commit per memd write, hand edits as the user's, secrets never committed."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import jobs.index as index_job
from memd.git.commits import after_run
from memd.git.repo import Repo
from memd.history import runs as history
from memd.history import snapshots as swap
from memd.history import store
from memd.job.context import make_context
from memd.logs.events import get_logger
from memd.sync.run import status
from memd.tree import Home, Place
from tests.jobs.dream.helpers import write_mem
from tests.procs import memd_env, run_memd
from tests.sync.helpers import GIT_ENV, git, hand_write, log_subjects, make_home, memd_write, settings_of, text

SECRET = "ANTHROPIC_API_KEY=sk-ant-api03-" + "Zx9" * 30


def _git(home: Home, *args: str) -> str:
    return git("--git-dir", str(home.memd_dir / "git"), *args)


def _index_run(home: Home, place: Place) -> None:
    ctx = make_context(home, settings_of(home), log=get_logger("test"))
    try:
        index_job.run(ctx, place, False)
    finally:
        ctx.conn.close()


def test_off_by_default_nothing_is_kept_in_git(tmp_path: Path) -> None:
    home = make_home(tmp_path, "h", None, git=False)
    memd_write(home, None, "tabs.md", text("tabs", "Use tabs."))
    _index_run(home, Place.global_())
    assert not (home.memd_dir / "git").exists()


def test_every_memd_write_is_one_commit_naming_run_job_and_reason(tmp_path: Path) -> None:
    home = make_home(tmp_path, "h", None)
    hand_write(home, None, "old.md", text("old", "Was here before git."))
    info = memd_write(home, None, "tabs.md", text("tabs", "Use tabs."), job="extract", reason="extract of session s1")
    assert info is not None
    info2 = memd_write(home, None, "tabs.md", text("tabs", "Use tabs, always."), job="remember", reason="memd remember")
    assert info2 is not None
    subjects = log_subjects(home)
    assert subjects == ["remember: memd remember (1 updated)", "extract: extract of session s1 (1 added)",
                        "memd: start keeping memory in git"]  # fmt: skip
    body = _git(home, "log", "-1", "--format=%B", "main")
    assert f"Memd-Run: {info2['run']}" in body and "Memd-Job: remember" in body and "Memd-Scope: global" in body
    assert _git(home, "show", "main:global/tabs.md") == text("tabs", "Use tabs, always.")
    # the first commit holds what was there before; the write's own file is in its own commit
    assert _git(home, "ls-tree", "--name-only", "-r", "main~2").split() == ["global/old.md"]
    # derived files are not tracked
    assert "MEMORY.md" not in _git(home, "ls-tree", "-r", "--name-only", "main")
    assert _git(home, "fsck", "--strict") == ""


def test_a_hand_edit_is_committed_by_the_next_index_run_as_the_users_change(tmp_path: Path) -> None:
    home = make_home(tmp_path, "h", None)
    memd_write(home, None, "tabs.md", text("tabs", "Use tabs."))
    hand_write(home, None, "tabs.md", text("tabs", "Use tabs. Edited by hand."))
    hand_write(home, None, "new.md", text("new", "Added by hand."))
    _index_run(home, Place.global_())
    assert log_subjects(home)[0] == "hand edits in global"
    assert _git(home, "log", "-1", "--format=%an <%ae> / %cn", "main").strip() == "Test User <user@example.invalid> / memd"
    (home.global_memory / "new.md").unlink()
    _index_run(home, Place.global_())
    assert "global/new.md" not in _git(home, "ls-tree", "-r", "--name-only", "main")
    _index_run(home, Place.global_())  # nothing changed: no empty commit
    assert log_subjects(home) == ["hand edits in global", "hand edits in global", "extract: test write (1 added)"]


def test_undo_is_a_new_commit_never_a_rewrite(tmp_path: Path) -> None:
    home = make_home(tmp_path, "h", None)
    memd_write(home, None, "tabs.md", text("tabs", "Use tabs."))
    memd_write(home, None, "tabs.md", text("tabs", "Use spaces."))
    before = _git(home, "rev-parse", "main").strip()
    info = history.undo(home, settings_of(home), Place.global_(), None, now=datetime.now(UTC), lock_timeout=5)
    after_run(home, Place.global_(), info, settings_of(home))  # as `memd undo` does once the undo is durable
    assert _git(home, "merge-base", "--is-ancestor", before, "main") == ""
    assert log_subjects(home)[0].startswith("undo: undo of ")
    assert _git(home, "show", "main:global/tabs.md") == text("tabs", "Use tabs.")


def test_a_dream_swap_is_one_commit(tmp_path: Path) -> None:
    home = make_home(tmp_path, "h", None)
    for n in ("a", "b"):
        memd_write(home, None, f"{n}.md", text(n, f"memory {n}"))
    place = Place.global_()
    run_id = store.new_run_id(datetime.now(UTC))
    entry = swap.snapshot(home, place, run_id)
    staged = swap.stage(home, place, run_id, source=home.global_memory, link=True)
    (staged.path / "b.md").unlink()
    swap.seal(staged)
    info = {"run": run_id, "scope": "global", "kind": "dream", "provider": "offline",
            "changes": {"deleted": [{"name": "b", "file": "b.md"}]}}
    store.write_run_info(entry, info)
    swap.swap_in(home, place, run_id, staged.path)
    after_run(home, place, info, settings_of(home))  # as the dream job does after its swap
    assert log_subjects(home)[0] == "dream: consolidation (offline) (1 deleted)"
    assert _git(home, "ls-tree", "-r", "--name-only", "main").split() == ["global/a.md"]


def test_a_secret_is_never_committed_and_is_reported(tmp_path: Path) -> None:
    home = make_home(tmp_path, "h", None)
    memd_write(home, None, "tabs.md", text("tabs", "Use tabs."))
    memd_write(home, None, "tabs.md", text("tabs", f"Use tabs.\n{SECRET}"))
    hand_write(home, None, "creds.md", text("creds", f"the key: {SECRET}"))
    _index_run(home, Place.global_())
    memd_write(home, None, "said.md", text("said", "clean body"), reason=f"the user said {SECRET}")  # a reason quoting it
    everything = _git(home, "log", "-p", "--all")
    assert "sk-ant-api03" not in everything
    assert _git(home, "show", "main:global/tabs.md") == text("tabs", "Use tabs.")  # the last clean version stays
    refused = {Path(r["file"]).name: r["reason"] for r in status(home, settings_of(home))["refused"]}
    assert set(refused) == {"tabs.md", "creds.md"} and "secret" in refused["tabs.md"]
    # once the secret is gone the file is committed and the report clears
    hand_write(home, None, "creds.md", text("creds", "the key lives in the vault"))
    _index_run(home, Place.global_())
    assert "creds.md" not in {Path(r["file"]).name for r in status(home, settings_of(home))["refused"]}
    assert "vault" in _git(home, "show", "main:global/creds.md")


def test_stale_git_lock_files_from_a_killed_process_are_cleared(tmp_path: Path) -> None:
    home = make_home(tmp_path, "h", None)
    memd_write(home, None, "a.md", text("a", "one"))
    (home.memd_dir / "git" / "refs" / "heads" / "main.lock").write_text("")
    memd_write(home, None, "b.md", text("b", "two"))
    assert log_subjects(home)[0].startswith("extract:")
    assert not (home.memd_dir / "git" / "refs" / "heads" / "main.lock").exists()


def test_a_kill_between_git_init_and_its_settings_is_finished_by_the_next_write(tmp_path: Path) -> None:
    home = make_home(tmp_path, "h", None)
    (home.memd_dir).mkdir(parents=True, exist_ok=True)
    git("init", "-q", "--bare", "-b", "main", str(home.memd_dir / "git"))  # killed right after `git init`
    memd_write(home, None, "a.md", text("a", "one"))
    assert _git(home, "config", "--get", "core.logAllRefUpdates").strip() == "always"  # the reflog is kept
    assert _git(home, "config", "--get", "memd.layout").strip() == "1"
    assert _git(home, "reflog", "show", "main").strip()


def test_the_repository_is_one_a_user_reads_and_repairs_with_git(tmp_path: Path) -> None:
    home = make_home(tmp_path, "h", None)
    memd_write(home, None, "a.md", text("a", "one"))
    clone = tmp_path / "clone"
    git("clone", "-q", str(home.memd_dir / "git"), str(clone))
    assert (clone / "global" / "a.md").read_text() == text("a", "one")
    with Repo(home).locked(5) as repo:
        assert repo.git.rev("main") is not None


def test_every_writer_through_its_command_ends_as_a_commit(tmp_path: Path) -> None:
    """The writers call git once their run is durable (nothing below the write path reaches up):
    remember, forget and undo each end as one commit; a run that changed nothing, none."""
    home = make_home(tmp_path, "h", None)
    env = memd_env(**GIT_ENV)

    def ok(*args: str) -> None:
        r = run_memd(home.root, *args, env=env)
        assert r.returncode == 0, (args, r.stdout, r.stderr)

    ok("remember", "--global", "We always squash commits before merging a branch.")
    assert log_subjects(home)[0].startswith("remember: ")
    ok("remember", "--global", "We always run the linter before pushing a branch.")
    names = [p.stem for p in home.global_memory.glob("*.md") if p.name != "MEMORY.md"]
    ok("forget", "--global", sorted(names)[0])
    assert log_subjects(home)[0].startswith("forget: ")
    ok("undo", "--global")
    assert log_subjects(home)[0].startswith("undo: ")
    before = log_subjects(home)
    ok("run-now", "dream", "--global", "--force")  # offline, two distinct memories: nothing to change
    assert log_subjects(home) == before  # a run that changed nothing commits nothing
    assert _git(home, "fsck", "--strict") == ""


def test_a_dream_that_merges_through_the_job_is_one_commit(tmp_path: Path) -> None:
    home = make_home(tmp_path, "h", None)
    home.global_memory.mkdir(parents=True, exist_ok=True)
    body = "Topic 1: we decided this yesterday; review it next week"
    write_mem(home.global_memory, "note-001", "note 1 about topic 1", "project", body + ".", age_h=40)
    write_mem(home.global_memory, "note-001-copy", "note 1 about topic 1", "project", body + "!", age_h=30)
    _index_run(home, Place.global_())
    r = run_memd(home.root, "run-now", "dream", "--global", "--force", "--json", env=memd_env(**GIT_ENV))
    assert r.returncode == 0, r.stderr
    assert log_subjects(home)[0].startswith("dream: consolidation (offline)"), (log_subjects(home), r.stdout)
    assert len(_git(home, "ls-tree", "-r", "--name-only", "main").split()) == 1
