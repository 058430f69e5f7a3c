"""`memd context`'s block (memd.agent.context): what each agent gets, instruction files and `@include`."""

from __future__ import annotations

import os
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from memd.agent import context as inject
from memd.agent.hooks import HOOK_MAX_CHARS
from memd.index.refresh import refresh_all
from memd.index.render import render_drawer
from memd.keys import project_key
from memd.memory.file import render_memory, write_memory
from memd.memory.scan import scan_dir
from memd.tree import Home
from tests.jobkit import make_settings

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Home, Path]:
    """A home (the memd home), a git project, and HOME in the temp dir (for `~/`)."""
    user_home = tmp_path / "user"
    user_home.mkdir()
    monkeypatch.setenv("HOME", str(user_home))
    home = Home(tmp_path / "agent-home")
    proj = tmp_path / "proj"
    (proj / ".git").mkdir(parents=True)
    (proj / "sub").mkdir()
    write_memory(home.global_memory, "prefers-tabs", render_memory("prefers-tabs", "tabs, never spaces", "user",
                                                                   "Indent with tabs (DRAWER-MARK)."))  # fmt: skip
    write_memory(home.project_memory(project_key(proj)), "deploy-fridays",
                 render_memory("deploy-fridays", "deploys only on Fridays (INDEX-MARK)", "project", "Fridays."))  # fmt: skip
    refresh_all(home)
    return home, proj


def build(home: Home, cwd: Path, agent: str = "deepcode", settings: object = None, **kw: object) -> inject.Context:
    return inject.build(home, settings or make_settings(), str(cwd), inject.AGENTS[agent], now=lambda: NOW, **kw)  # type: ignore[arg-type]


def names(ctx: inject.Context) -> list[str]:
    return [s.name for s in ctx.sections]


def test_claude_gets_drawer_rule_and_date_but_not_what_it_loads_itself(world: tuple[Home, Path]) -> None:
    home, proj = world
    (proj / "CLAUDE.md").write_text("CLAUDE-MARK")
    (proj / "DEEPCODE.md").write_text("DEEPCODE-MARK")
    ctx = build(home, proj / "sub", "claude")
    assert names(ctx) == ["globalMemory", "memoryStaleness", "currentDate"]
    body = ctx.body()
    assert "DRAWER-MARK" in body and "Today's date is 2026-11-30." in body and "point-in-time" in body
    assert "INDEX-MARK" not in body and "CLAUDE-MARK" not in body and "DEEPCODE-MARK" not in body
    assert ctx.project_root == str(proj) and ctx.drawer_files == ["memory/prefers-tabs.md"]


def test_deepcode_gets_instructions_memory_index_and_the_seed_wrapper(world: tuple[Home, Path]) -> None:
    home, proj = world
    (proj / "DEEPCODE.local.md").write_text("LOCAL-MARK\n")
    (proj / "DEEPCODE.md").write_text("PROJECT-MARK\n")
    (home.root / "DEEPCODE.md").write_text("USER-MARK\n")
    ctx = build(home, proj)
    assert names(ctx) == ["deepcodeMd", "globalMemory", "projectMemory", "memoryStaleness", "currentDate"]
    instructions = ctx.sections[0].text
    # most specific first, joined as the seed joins them
    assert instructions.index("LOCAL-MARK") < instructions.index("PROJECT-MARK") < instructions.index("USER-MARK")
    assert instructions.count("\n---\n") == 2 and instructions.startswith(inject.INSTRUCTIONS_INTRO)
    assert "INDEX-MARK" in ctx.sections[2].text
    text = ctx.text()
    assert text.startswith("<system-reminder>\nAs you answer the user's questions, you can use the following context:\n# deepcodeMd\n")
    assert text.endswith("IMPORTANT: this context may or may not be relevant to your tasks.\n</system-reminder>\n")


def test_mewcode_reads_its_own_files_in_the_seeds_order(world: tuple[Home, Path]) -> None:
    home, proj = world
    (proj / ".mewcode").mkdir()
    (proj / "MEWCODE.md").write_text("ROOT-MARK")
    (proj / ".mewcode" / "MEWCODE.md").write_text("CONFIG-MARK")
    (Path.home() / ".mewcode").mkdir()
    (Path.home() / ".mewcode" / "MEWCODE.md").write_text("GLOBAL-MARK")
    (proj / "DEEPCODE.md").write_text("DEEPCODE-MARK")
    ctx = build(home, proj, "mewcode")
    assert ctx.sections[0].name == "mewcodeMd"
    text = ctx.sections[0].text
    assert text.index("ROOT-MARK") < text.index("CONFIG-MARK") < text.index("GLOBAL-MARK")
    assert "DEEPCODE-MARK" not in ctx.body()


def test_includes_relative_paths_nested_to_depth_five_and_never_home(world: tuple[Home, Path]) -> None:
    home, proj = world
    (proj / "docs").mkdir()
    (proj / "DEEPCODE.md").write_text("top\n@include docs/d1.md\n@include ~/style.md\n")
    for i in range(1, 7):
        (proj / "docs" / f"d{i}.md").write_text(f"LEVEL-{i}\n@include d{i + 1}.md\n")
    (Path.home() / "style.md").write_text("HOME-STYLE\n")
    ctx = build(home, proj)
    text = ctx.sections[0].text
    assert all(f"LEVEL-{i}" in text for i in range(1, 6)) and "LEVEL-6" not in text
    assert "HOME-STYLE" not in text and "deeper than 5 levels" in text
    refused = [i for i in ctx.includes if i.reason]
    assert [(Path(i.file).name, i.reason) for i in refused] == [
        ("d5.md", "deeper than 5 levels"), ("DEEPCODE.md", "only paths relative to the including file are included")]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("@include /etc/hostname", "only paths relative to the including file are included"),
        ("@include ../outside.md", "outside the project root"),
        ("@include missing.md", "not a file"),
        ("@include docs", "not a file"),
        ("@include DEEPCODE.md", "a cycle"),
        ("@include link.md", "a symbolic link"),
    ],
)
def test_refused_includes_leave_a_note_and_nothing_else(world: tuple[Home, Path], line: str, reason: str) -> None:
    home, proj = world
    outside = proj.parent / "outside.md"
    outside.write_text("OUTSIDE-MARK")
    (proj / "docs").mkdir()
    os.symlink(outside, proj / "link.md")
    (proj / "DEEPCODE.md").write_text(f"before\n{line}\nafter\n")
    ctx = build(home, proj)
    text = ctx.sections[0].text
    assert "OUTSIDE-MARK" not in text and "before" in text and "after" in text
    assert f"not included: {reason}" in text
    assert [i.reason for i in ctx.includes] == [reason]


def test_indirect_cycles_are_refused_and_fenced_lines_left_alone(world: tuple[Home, Path]) -> None:
    home, proj = world
    (proj / "DEEPCODE.md").write_text("A\n@include b.md\n```\n@include c.md\n```\n")
    (proj / "b.md").write_text("B\n@include DEEPCODE.md\n")
    (proj / "c.md").write_text("C-MARK")
    text = build(home, proj).sections[0].text
    assert "B" in text and "not included: a cycle" in text
    assert "C-MARK" not in text and "@include c.md" in text


def test_memory_switches_and_a_missing_drawer(world: tuple[Home, Path], tmp_path: Path) -> None:
    home, proj = world
    off = build(home, proj, settings=make_settings(memory={"enabled": False}))
    assert names(off) == ["currentDate"]
    no_drawer = build(home, proj, settings=make_settings(memory={"global": {"enabled": False}}))
    assert "globalMemory" not in names(no_drawer) and "projectMemory" in names(no_drawer)
    empty = Home(tmp_path / "empty")
    assert names(build(empty, proj, "claude")) == ["memoryStaleness", "currentDate"]


def test_drawer_is_rendered_when_the_file_is_old_missing_or_over_the_budget(world: tuple[Home, Path]) -> None:
    home, _proj = world
    on_disk = home.drawer_render.read_text()
    rendered_on = datetime.fromtimestamp(home.drawer_render.stat().st_mtime, UTC).date()
    assert inject.drawer_text(home, 8192, rendered_on) == on_disk  # today's render: used as is
    later = inject.drawer_text(home, 8192, date(2030, 1, 1))  # ages count from the day: rendered anew
    assert later is not None and later != on_disk and "DRAWER-MARK" in later and "days old" in later
    home.drawer_render.unlink()
    fresh = inject.drawer_text(home, 8192, rendered_on)
    assert fresh == on_disk
    write_memory(home.global_memory, "long-one", render_memory("long-one", "a long memory", "user", "z" * 2000))
    small = inject.drawer_text(home, 8192, rendered_on, max_chars=1000)
    assert small is not None and len(small) <= 1000 and "DRAWER-MARK" not in small  # the index form
    assert "prefers-tabs" in small and "long-one" in small


def test_drawer_full_files_names_exactly_the_memories_of_a_full_render(tmp_path: Path) -> None:
    """The contract between memd.index.render's full render and what the SessionStart hook records as surfaced."""
    d = tmp_path / "memory"
    for n in ("alpha", "beta-two", "gamma"):
        write_memory(d, n, render_memory(n, f"{n} description", "user", f"{n} body"))
    mems = scan_dir(d, "global", None).memories
    full = render_drawer(mems, max_bytes=8192, today=date.today())
    assert full.mode == "full"
    assert sorted(inject.drawer_full_files(full.text)) == ["memory/alpha.md", "memory/beta-two.md", "memory/gamma.md"]
    index = render_drawer(mems, max_bytes=300, today=date.today())
    assert index.mode == "index" and inject.drawer_full_files(index.text) == []


def test_the_hook_budget_holds(world: tuple[Home, Path]) -> None:
    home, proj = world
    for i in range(60):
        write_memory(home.global_memory, f"note-{i}", render_memory(f"note-{i}", "x" * 100, "user", "y" * 500))
    refresh_all(home)
    # the render on disk is over 9,500 characters: the hook gets the index form
    ctx = build(home, proj, "claude", settings=make_settings(memory={"global": {"maxBytes": 60000}}),
                max_chars=HOOK_MAX_CHARS)  # fmt: skip
    assert len(ctx.body()) <= HOOK_MAX_CHARS and "globalMemory" in names(ctx)


# --------------------------------------------------------------------------- includes confined (issue 22 point 5)

PRIVATE_KEY = ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
               "QyNTUxOQAAACB0ZXN0a2V5dGVzdGtleXRlc3RrZXl0ZXN0a2V5dGVzdGtleQAAAJg=\n-----END OPENSSH PRIVATE KEY-----\n")


def _included(home: Home, proj: Path, line: str, agent: str = "mewcode") -> tuple[str, list[str]]:
    (proj / ("MEWCODE.md" if agent == "mewcode" else "DEEPCODE.md")).write_text(f"before\n{line}\nafter\n")
    ctx = build(home, proj, agent)
    return ctx.body(), [i.reason for i in ctx.includes]


def test_an_include_of_the_users_ssh_key_is_refused(world: tuple[Home, Path]) -> None:
    """The report: a project's MEWCODE.md with `@include ../.ssh/id_rsa` put the key, verbatim, into
    the block. Here the project sits in the user's home, beside `.ssh`."""
    home, _ = world
    proj = Path.home() / "proj"
    (proj / ".git").mkdir(parents=True)
    (Path.home() / ".ssh").mkdir()
    (Path.home() / ".ssh" / "id_rsa").write_text(PRIVATE_KEY)
    for line in ("@include ../.ssh/id_rsa", "@include ~/.ssh/id_rsa", f"@include {Path.home() / '.ssh' / 'id_rsa'}",
                 "@include sub/../../.ssh/id_rsa"):  # fmt: skip
        body, reasons = _included(home, proj, line)
        assert "PRIVATE KEY" not in body and "b3BlbnNzaC1rZXkt" not in body, line
        assert reasons and reasons[0] in ("outside the project root",
                                          "only paths relative to the including file are included"), (line, reasons)


def test_links_inside_the_project_are_refused_wherever_they_point(world: tuple[Home, Path]) -> None:
    home, proj = world
    (proj.parent / "outside.md").write_text("OUTSIDE-MARK")
    (proj / "inside.md").write_text("INSIDE-MARK")
    (proj / "docs").mkdir()
    os.symlink(proj.parent / "outside.md", proj / "out-link.md")
    os.symlink(proj / "inside.md", proj / "in-link.md")
    os.symlink(proj.parent, proj / "docs" / "up")  # a linked directory on the way
    for line, mark in (("@include out-link.md", "OUTSIDE-MARK"), ("@include in-link.md", "INSIDE-MARK"),
                       ("@include docs/up/outside.md", "OUTSIDE-MARK")):  # fmt: skip
        body, reasons = _included(home, proj, line)
        assert mark not in body and reasons == ["a symbolic link"], (line, reasons)


def test_a_hard_link_to_a_file_outside_is_refused(world: tuple[Home, Path]) -> None:
    """A hard link inside the project reached /etc/passwd; its other name may lie anywhere."""
    home, proj = world
    secret = proj.parent / "passwd"
    secret.write_text("root:x:0:0:HARDLINK-MARK:/root:/bin/bash\n")
    os.link(secret, proj / "users.md")
    body, reasons = _included(home, proj, "@include users.md")
    assert "HARDLINK-MARK" not in body and reasons == ["a hard link (2 names)"]


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="giving a file away needs root")
def test_a_file_the_user_does_not_own_is_refused(world: tuple[Home, Path]) -> None:
    home, proj = world
    (proj / "theirs.md").write_text("THEIRS-MARK")
    os.chown(proj / "theirs.md", 12345, 12345)
    body, reasons = _included(home, proj, "@include theirs.md")
    assert "THEIRS-MARK" not in body and reasons == ["not owned by the user"]


def test_included_and_written_text_is_redacted(world: tuple[Home, Path]) -> None:
    home, proj = world
    (proj / "ops.md").write_text("Deploy key:\n" + PRIVATE_KEY + "Token ghp_abcdefghijklmnopqrstuvwxyz0123456789\n")
    body, reasons = _included(home, proj, "@include ops.md", agent="deepcode")
    assert reasons == [""] and "Deploy key:" in body
    assert "b3BlbnNzaC1rZXkt" not in body and "ghp_abcdefghijklmnopqrstuvwxyz0123456789" not in body
    assert "[REDACTED:" in body


def test_a_user_level_file_includes_only_from_its_own_directory(world: tuple[Home, Path]) -> None:
    home, proj = world
    (home.root / "style.md").write_text("USER-STYLE")
    (home.root / "DEEPCODE.md").write_text("@include style.md\n@include ../user/notes.md\n")
    (Path.home() / "notes.md").write_text("NOTES-MARK")
    ctx = build(home, proj)
    body = ctx.body()
    assert "USER-STYLE" in body and "NOTES-MARK" not in body
    assert [i.reason for i in ctx.includes] == ["", "outside the project root"]
