"""The file-by-file merge of two trees of memories (pure: no git, no files)."""

from __future__ import annotations

import pytest

from memd.git.layout import merge_manifests, normalise_remote, repo_dir
from memd.sync.merge import merge_entries, merged_text
from memd.sync.run import due, retry_after
from tests.sync.helpers import text

B = "100644"


def t(**files: str) -> dict[str, tuple[str, str]]:
    return {f"global/{k.replace('_', '-')}.md": (B, v) for k, v in files.items()}


def host(_path: str) -> str:
    return "desk"


def test_one_side_changes_take_that_side() -> None:
    base = t(a="1", b="1", c="1")
    ours = t(a="2", b="1", c="1", d="9")
    theirs = t(a="1", b="3")  # c deleted there
    m = merge_entries(base, ours, theirs, host)
    assert m.entries == t(a="2", b="3", d="9")
    assert m.events == []


def test_changed_on_both_sides_keeps_both_versions() -> None:
    m = merge_entries(t(a="1"), t(a="2"), t(a="3"), host)
    assert m.entries == {"global/a.md": (B, "2"), "global/a.conflict-desk.md": (B, "3")}
    assert m.events == [{"kind": "changed-both", "path": "global/a.md", "copy": "global/a.conflict-desk.md", "host": "desk"}]


def test_created_on_both_sides_is_renamed_not_overwritten() -> None:
    m = merge_entries({}, t(a="2"), t(a="3"), host)
    assert m.entries == {"global/a.md": (B, "2"), "global/a-desk.md": (B, "3")}
    assert m.events[0]["kind"] == "created-both"


def test_the_same_change_on_both_sides_is_no_conflict() -> None:
    assert merge_entries(t(a="1"), t(a="2"), t(a="2"), host).events == []


@pytest.mark.parametrize(("ours", "theirs"), [(t(a="2"), {}), ({}, t(a="2"))])
def test_an_edit_wins_over_a_deletion(ours: dict[str, tuple[str, str]], theirs: dict[str, tuple[str, str]]) -> None:
    m = merge_entries(t(a="1"), ours, theirs, host)
    assert m.entries == t(a="2")
    assert m.events[0]["kind"] == "kept-changed"


def test_a_repeated_merge_reuses_its_copy_and_drops_identical_copies() -> None:
    # after a crash the copy is already ours: no second copy
    ours = {"global/a.md": (B, "2"), "global/a.conflict-desk.md": (B, "3")}
    m = merge_entries(t(a="1"), ours, t(a="3"), host)
    assert m.entries == ours
    # a conflict copy holding what the file holds is dropped
    m = merge_entries({}, {"global/a.md": (B, "3"), "global/a.conflict-pc.md": (B, "3")}, {}, host)
    assert m.entries == {"global/a.md": (B, "3")}


def test_a_taken_copy_name_gets_a_number() -> None:
    ours = {"global/a.md": (B, "2"), "global/a.conflict-desk.md": (B, "7")}
    m = merge_entries(t(a="1"), ours, t(a="3"), host)
    assert m.entries["global/a.conflict-desk-2.md"] == (B, "3")


def test_manifests_merge_as_a_union() -> None:
    a = {"projects": {"x-1": {"identity": "github.com/a/x", "keys": {"laptop": "-home-a-x"}}}}
    b = {"projects": {"x-1": {"identity": "github.com/a/x", "keys": {"desk": "-srv-x"}}, "y-2": {"identity": "key:-y", "keys": {}}}}
    m = merge_manifests({}, a, b)
    assert m["projects"]["x-1"]["keys"] == {"laptop": "-home-a-x", "desk": "-srv-x"}
    assert set(m["projects"]) == {"x-1", "y-2"}


@pytest.mark.parametrize(("url", "identity"), [
    ("git@GitHub.com:acme/webshop.git", "github.com/acme/webshop"),
    ("https://me@github.com/acme/webshop", "github.com/acme/webshop"),
    ("https://me:pw@GITHUB.COM/acme/webshop.git/", "github.com/acme/webshop"),
    ("ssh://git@github.com:22/acme/webshop.git", "github.com/acme/webshop"),
    ("git://github.com/acme/webshop", "github.com/acme/webshop"),
    ("/srv/git/webshop.git", "/srv/git/webshop"),
    ("file:///srv/git/webshop.git", "/srv/git/webshop"),
    ("", None),
])  # fmt: skip
def test_remote_urls_are_normalised(url: str, identity: str | None) -> None:
    assert normalise_remote(url) == identity


def test_repo_dirs_are_stable_readable_and_distinct() -> None:
    assert repo_dir("github.com/acme/webshop") == repo_dir("github.com/acme/webshop")
    assert repo_dir("github.com/acme/webshop").startswith("projects/github.com-acme-webshop-")
    assert repo_dir("a/b-c") != repo_dir("a-b/c")


def test_backoff_doubles_up_to_the_interval() -> None:
    assert [retry_after(n, 120) for n in (1, 2, 3, 4, 5)] == [15, 30, 60, 120, 120]


def test_due_rules() -> None:
    every = 60.0
    assert due(100, {}, every, ahead=False)  # never synced: at once
    assert not due(100, {"last_attempt_ts": 90}, every, ahead=False)
    assert due(100, {"last_attempt_ts": 30}, every, ahead=False)  # the interval passed
    assert due(100, {"last_attempt_ts": 85}, every, ahead=True)  # a write, 10 s after the last try
    assert not due(100, {"last_attempt_ts": 30, "next_try_ts": 120}, every, ahead=True)  # backing off


def test_merged_text_is_a_memory_holding_both_bodies() -> None:
    ours = text("tabs", "Use tabs.\nAlways.", updated="2026-01-02T00:00:00Z").encode()
    theirs = text("tabs", "Use tabs.\nEven in YAML.", updated="2026-01-01T00:00:00Z").encode()
    merged = merged_text(ours, theirs)
    assert merged is not None
    assert "Always." in merged and "Even in YAML." in merged and "<<<<" not in merged
