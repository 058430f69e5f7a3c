"""`Place`: the one value for a job's target, a lock's scope and a history's scope (SPEC §1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memd.tree import Home, Place


@pytest.mark.parametrize("text", ["global", "project:-home-u-repo", "session:-home-u-repo:0b9c-uuid", "project:odd key é"])
def test_parse_is_the_inverse_of_str(text: str) -> None:
    assert str(Place.parse(text)) == text


@pytest.mark.parametrize(
    "text", ["", "x", "global:k", "project:", "project:..", "project:a/b", "session:k", "session:k:", "session:k:a/b",
             "session::sid", "project:.", "project:a\0b"],
)  # fmt: skip
def test_malformed_places_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a place"):
        Place.parse(text)


def test_paths_a_place_owns(tmp_path: Path) -> None:
    home = Home(tmp_path)
    g, p, s = Place.global_(), Place.project("k"), Place.session("k", "s1")
    assert g.memory_dir(home) == tmp_path / "memory"
    assert p.memory_dir(home) == s.memory_dir(home) == tmp_path / "projects" / "k" / "memory"
    assert s.summary_path(home) == tmp_path / "projects" / "k" / "s1" / "session-memory" / "summary.md"
    with pytest.raises(ValueError):
        p.summary_path(home)
    assert Place.memory(None) == g and Place.memory("k") == p


def test_names_are_safe_and_distinct() -> None:
    odd = [Place.project("a_b"), Place.project("a-b"), Place.project("a b"), Place.project("a" * 300)]
    locks = {p.lock_name for p in odd}
    hist = {p.history_name for p in odd}
    assert len(locks) == len(hist) == len(odd)
    for name in locks | hist:
        assert "/" not in name and len(name) < 255
    assert Place.global_().lock_name == "global.lock" and Place.global_().history_name == "global"
    assert Place.project("-home-u-repo").history_name == "project--home-u-repo"


def test_canonical_order() -> None:
    places = [Place.session("a", "2"), Place.project("b"), Place.global_(), Place.project("a"), Place.session("a", "1")]
    assert [str(p) for p in sorted(places, key=lambda p: p.sort_key)] == [
        "global", "project:a", "project:b", "session:a:1", "session:a:2"]
