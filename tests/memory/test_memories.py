"""Memory files: parsing, rendering, scanning a hostile directory, writing safely."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd.memory.file import (
    TYPES,
    Memory,
    MemoryParseError,
    delete_memory,
    parse_memory,
    render_memory,
    write_memory,
)
from memd.memory.scan import scan_dir

GOOD = """---
name: prefers-tabs
description: the user indents with tabs in this project, not spaces
metadata:
  type: feedback
---

This project indents with tabs. **Why:** all historic code uses tabs.
"""


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------- parsing


def test_parse_metadata_type_form() -> None:
    mem = parse_memory("/x/prefers-tabs.md", GOOD, mtime=12.5, scope="project", project_key="k")
    assert (mem.name, mem.type, mem.scope, mem.project_key, mem.mtime) == (
        "prefers-tabs",
        "feedback",
        "project",
        "k",
        12.5,
    )
    assert mem.description == "the user indents with tabs in this project, not spaces"
    assert mem.body == "This project indents with tabs. **Why:** all historic code uses tabs."
    assert mem.size == len(GOOD.encode())
    assert mem.metadata == {}


def test_parse_top_level_type_form_and_case() -> None:
    text = "---\nname: who\ndescription: the user's role\ntype: User\n---\nbody\n"
    assert parse_memory("who.md", text).type == "user"


def test_parse_keeps_extra_metadata_and_bom() -> None:
    text = "\ufeff---\nname: n\ndescription: d\nsource: chat\nmetadata:\n  type: project\n  created: x\n---\nb"
    mem = parse_memory("n.md", text)
    assert mem.metadata == {"source": "chat", "created": "x"}


def test_parse_accepts_numeric_name() -> None:
    assert parse_memory("a.md", "---\nname: 2024\ndescription: d\ntype: user\n---\n").name == "2024"


@pytest.mark.parametrize(
    ("text", "reason_part"),
    [
        ("just a body\n", "no front matter"),
        ("", "no front matter"),
        ("---\nname: x\ndescription: y\ntype: user\n", "not closed"),
        ("---\nname: [unclosed\ndescription: y\n---\n", "bad YAML"),
        ("---\n- a\n- b\n---\n", "not a YAML mapping"),
        ("---\ndescription: y\ntype: user\n---\n", "missing name"),
        ("---\nname: x\ntype: user\n---\n", "missing description"),
        ("---\nname: x\ndescription: y\n---\n", "missing type"),
        ("---\nname: x\ndescription: y\ntype: opinion\n---\n", "unknown type 'opinion'"),
        ("---\nname: x\ndescription: y\nmetadata:\n  type: gossip\n---\n", "unknown type 'gossip'"),
        ("---\nname: x\ndescription: y\ntype: user\nmetadata:\n  type: project\n---\n", "conflicting type"),
        ("---\nname: [a, b]\ndescription: y\ntype: user\n---\n", "name must be a string"),
        ("---\nname: '  '\ndescription: y\ntype: user\n---\n", "name is empty"),
        ("---\nname: x\ndescription: y\nmetadata: 3\n---\n", "missing type"),
        ("---\nname: x\ndescription: y\ntype: user\nmetadata: 3\n---\n", "metadata must be a mapping"),
    ],
)
def test_parse_errors_have_one_line_reasons(text: str, reason_part: str) -> None:
    with pytest.raises(MemoryParseError) as info:
        parse_memory("/m/bad.md", text)
    assert reason_part in info.value.reason
    assert "\n" not in info.value.reason
    assert info.value.path == Path("/m/bad.md")
    assert str(info.value).startswith("/m/bad.md: ")


def test_parse_non_utf8_bytes() -> None:
    data = b"---\nname: x\ndescription: caf\xe9\ntype: user\n---\n"
    with pytest.raises(MemoryParseError) as info:
        parse_memory("latin1.md", data)
    assert "not valid UTF-8" in info.value.reason
    assert "0xe9" in info.value.reason


# --------------------------------------------------------------------------- rendering


def test_render_writes_metadata_type_form() -> None:
    text = render_memory("prefers-tabs", "tabs,\nnot spaces", "Feedback", "\nbody line\n\n", {"source": "s1"})
    assert text == (
        "---\nname: prefers-tabs\ndescription: tabs, not spaces\nmetadata:\n  type: feedback\n"
        "  source: s1\n---\n\nbody line\n"
    )


def test_render_quotes_yaml_line_breaks() -> None:
    text = render_memory("a", "b", "user", "c", {"\x85": "x\u2028y"})
    assert parse_memory("a.md", text).metadata == {"\x85": "x\u2028y"}


def test_parse_splits_lines_on_newline_only() -> None:
    text = "---\nname: n\ndescription: ab\ntype: user\n---\nline\u2028---\x0cmore\n"
    mem = parse_memory("n.md", text)
    assert mem.body == "line\u2028---\x0cmore"


def test_render_rejects_unknown_type() -> None:
    with pytest.raises(ValueError, match="unknown type"):
        render_memory("a", "b", "opinion", "c")


_line_text = st.text(min_size=1, max_size=60).filter(lambda s: s.split())


@settings(max_examples=200, deadline=None)
@given(
    name=_line_text,
    description=_line_text,
    kind=st.sampled_from(TYPES),
    body=st.text(max_size=300),
    extra=st.dictionaries(
        st.text(min_size=1, max_size=10).filter(lambda k: k != "type"),
        st.text(max_size=20),
        max_size=3,
    ),
)
def test_render_parse_round_trip(name: str, description: str, kind: str, body: str, extra: dict[str, str]) -> None:
    text = render_memory(name, description, kind, body, extra)
    mem = parse_memory("m.md", text)
    assert mem.name == " ".join(name.split())
    assert mem.description == " ".join(description.split())
    assert mem.type == kind
    assert mem.metadata == extra
    assert render_memory(mem.name, mem.description, mem.type, mem.body, mem.metadata) == text


# --------------------------------------------------------------------------- slugs and writing


def test_write_memory_is_private_and_atomic(tmp_path: Path) -> None:
    mdir = tmp_path / "home" / "memory"
    path = write_memory(mdir, "prefers-tabs", GOOD)
    assert path == mdir / "prefers-tabs.md"
    assert path.read_text() == GOOD
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(mdir.stat().st_mode) == 0o700
    assert [p.name for p in mdir.iterdir()] == ["prefers-tabs.md"]  # no temp file left
    write_memory(mdir, "prefers-tabs.md", GOOD.replace("tabs.", "TABS."))
    assert "TABS." in path.read_text()


@pytest.mark.parametrize("slug", ["../escape", "a/b", ".hidden", "", "MEMORY", "-x", "x/../../y"])
def test_write_memory_refuses_unsafe_slugs(tmp_path: Path, slug: str) -> None:
    with pytest.raises(ValueError):
        write_memory(tmp_path / "memory", slug, GOOD)
    assert not (tmp_path / "escape.md").exists()


def test_write_memory_refuses_to_write_through_symlink(tmp_path: Path) -> None:
    mdir = tmp_path / "memory"
    mdir.mkdir()
    outside = tmp_path / "outside.md"
    outside.write_text("precious")
    (mdir / "link.md").symlink_to(outside)
    with pytest.raises(OSError):
        write_memory(mdir, "link", GOOD)
    assert outside.read_text() == "precious"


def test_delete_memory(tmp_path: Path) -> None:
    path = write_memory(tmp_path, "gone", GOOD)
    assert delete_memory(path) is True
    assert not path.exists()
    assert delete_memory(path) is False
    (tmp_path / "MEMORY.md").write_text("index")
    with pytest.raises(ValueError):
        delete_memory(tmp_path / "MEMORY.md")
    assert (tmp_path / "MEMORY.md").exists()


# --------------------------------------------------------------------------- scanning


def _memory(name: str, kind: str = "user", body: str = "body") -> str:
    return render_memory(name, f"about {name}", kind, body)


def test_scan_hostile_directory(tmp_path: Path) -> None:
    """Every kind of bad file is reported with its reason and left untouched;
    the good files are still read."""
    mdir = tmp_path / "memory"
    mdir.mkdir()
    (mdir / "a-good.md").write_text(_memory("alpha"))
    (mdir / "b-good.md").write_text(_memory("beta", "project"))
    (mdir / "c-dup.md").write_text(_memory("alpha", "feedback"))  # same name as a-good.md
    (mdir / "d-nofront.md").write_text("no front matter here\n")
    (mdir / "e-badyaml.md").write_text("---\nname: [oops\n---\nbody\n")
    (mdir / "f-missing.md").write_text("---\nname: x\ntype: user\n---\n")
    (mdir / "g-type.md").write_text("---\nname: g\ndescription: d\ntype: opinion\n---\n")
    (mdir / "h-latin1.md").write_bytes(b"---\nname: h\ndescription: caf\xe9\ntype: user\n---\n")
    huge = mdir / "i-huge.md"
    with open(huge, "wb") as fh:
        fh.write(_memory("huge").encode())
        fh.truncate(50 * 1024 * 1024)  # sparse: instant to create
    outside = tmp_path / "outside-secret.md"
    outside.write_text(_memory("secret"))
    (mdir / "j-link.md").symlink_to(outside)
    (mdir / "k-dangling.md").symlink_to(tmp_path / "nowhere.md")
    # Not candidates: silently skipped.
    (mdir / "MEMORY.md").write_text("- [alpha](a-good.md) — stale index\n")
    (mdir / ".hidden.md").write_text(_memory("hidden"))
    (mdir / ".prefers-tabs.md.abc123.tmp").write_text("half")
    (mdir / "notes.md~").write_text(_memory("backup"))
    (mdir / "notes.txt").write_text("not markdown")
    (mdir / "subdir").mkdir()
    (mdir / "subdir" / "nested.md").write_text(_memory("nested"))

    before = {p.name: (_digest(p) if p.is_file() and not p.is_symlink() else None) for p in mdir.iterdir()}
    outside_before = _digest(outside)

    result = scan_dir(mdir, "project", "k")

    assert [m.name for m in result.memories] == ["alpha", "beta", "alpha", "d-nofront"]  # no front matter: a memory
    assert all(m.scope == "project" and m.project_key == "k" for m in result.memories)
    assert [(n.path.name, "no front matter" in n.reason) for n in result.notes] == [("d-nofront.md", True)]
    reasons = {p.path.name: p.reason for p in result.problems}
    assert set(reasons) == {
        "c-dup.md",
        "e-badyaml.md",
        "f-missing.md",
        "g-type.md",
        "h-latin1.md",
        "i-huge.md",
        "j-link.md",
        "k-dangling.md",
    }
    assert reasons["c-dup.md"] == "duplicate name 'alpha' (also in a-good.md)"
    assert "bad YAML" in reasons["e-badyaml.md"]
    assert "missing description" in reasons["f-missing.md"]
    assert "unknown type" in reasons["g-type.md"]
    assert "not valid UTF-8" in reasons["h-latin1.md"]
    assert "too large" in reasons["i-huge.md"] and "50.0 MB" in reasons["i-huge.md"]
    assert reasons["j-link.md"] == "symlink not followed"
    assert reasons["k-dangling.md"] == "symlink not followed"
    assert all(p.path.parent == mdir for p in result.problems)

    after = {p.name: (_digest(p) if p.is_file() and not p.is_symlink() else None) for p in mdir.iterdir()}
    assert after == before  # nothing deleted, nothing modified
    assert (mdir / "j-link.md").is_symlink()
    assert _digest(outside) == outside_before
    assert huge.stat().st_size == 50 * 1024 * 1024


def test_scan_size_cap_is_configurable(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text(_memory("a", body="x" * 500))
    assert scan_dir(tmp_path, max_bytes=10_000).memories
    result = scan_dir(tmp_path, max_bytes=100)
    assert not result.memories
    assert "too large" in result.problems[0].reason


def test_scan_reads_stat_fields(tmp_path: Path) -> None:
    path = tmp_path / "a.md"
    path.write_text(_memory("a"))
    os.utime(path, (1_700_000_000.25, 1_700_000_000.25))
    [mem] = scan_dir(tmp_path).memories
    assert isinstance(mem, Memory)
    assert mem.mtime == path.stat().st_mtime
    assert mem.size == path.stat().st_size
    assert mem.path == path


def test_scan_missing_directory_is_empty(tmp_path: Path) -> None:
    result = scan_dir(tmp_path / "nope")
    assert result.memories == [] and result.problems == []
