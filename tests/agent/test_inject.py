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


def test_includes_relative_and_home_paths_nested_to_depth_five(world: tuple[Home, Path]) -> None:
    home, proj = world
    (proj / "docs").mkdir()
    (proj / "DEEPCODE.md").write_text("top\n@include docs/d1.md\n@include ~/style.md\n")
    for i in range(1, 7):
        (proj / "docs" / f"d{i}.md").write_text(f"LEVEL-{i}\n@include d{i + 1}.md\n")
    (Path.home() / "style.md").write_text("HOME-STYLE\n")
    ctx = build(home, proj)
    text = ctx.sections[0].text
    assert all(f"LEVEL-{i}" in text for i in range(1, 6)) and "LEVEL-6" not in text
    assert "HOME-STYLE" in text and "deeper than 5 levels" in text
    refused = [i for i in ctx.includes if i.reason]
    assert [(Path(i.file).name, i.reason) for i in refused] == [("d5.md", "deeper than 5 levels")]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("@include /etc/hostname", "only relative and ~/ paths are included"),
        ("@include ../outside.md", "outside the project root and the home"),
        ("@include missing.md", "not a file"),
        ("@include docs", "not a file"),
        ("@include DEEPCODE.md", "a cycle"),
        ("@include link.md", "outside the project root and the home"),
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
