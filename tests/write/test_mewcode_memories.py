"""MewCode's own memory files (its seed §3, §4; issue 26 point 2): `memories.md` rendered at
`~/.mewcode/memories.md` and `<project>/.mewcode/memories.md` for a MewCode home, text a person
wrote kept, undoable; recall over `<project>/.mewcode/memory/*.md`."""

from __future__ import annotations

import json
from pathlib import Path

from memd.keys import project_key
from memd.write.mewcode import START, is_mewcode_home, merge, render_block
from tests.ledger.test_mewcode_projects import mew_project
from tests.procs import run_memd


def mew_home(tmp_path: Path, name: str = ".mewcode") -> tuple[Path, Path, str]:
    """A MewCode home and one project laid out as the seed says, its session in the ledger."""
    home = tmp_path / name
    (home / "projects").mkdir(parents=True)
    proj = mew_project(tmp_path / "code" / "shop")
    (home / "settings.json").write_text(json.dumps({"memd": {"roots": [str(tmp_path / "code")]}}))
    assert run_memd(home, "scan").returncode == 0
    return home, proj, project_key(proj)


def ok(home: Path, *args: str) -> str:
    r = run_memd(home, *args)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_memories_md_is_rendered_under_the_four_headings_at_the_seeds_two_places(tmp_path: Path) -> None:
    home, proj, key = mew_home(tmp_path)
    ok(home, "remember", "--project", key, "--type", "project", "--name", "uv", "使用 uv 作为包管理器")
    ok(home, "remember", "--project", key, "--type", "reference", "--name", "docs", "文档地址 https://docs.example.com")
    ok(home, "remember", "--global", "--type", "user", "--name", "naming", "变量命名用 snake_case")
    ok(home, "remember", "--global", "--type", "feedback", "--name", "lang", "项目实际是 Python 而非 Go")
    project_md = (proj / ".mewcode" / "memories.md").read_text(encoding="utf-8")
    assert project_md.startswith(START + "\n")
    assert "### 项目知识\n- " in project_md and "uv" in project_md.split("### 项目知识")[1].split("###")[0]
    assert "### 参考资料\n- " in project_md and "docs.example.com" in project_md.split("### 参考资料")[1]
    assert "### 用户偏好" not in project_md  # the drawer's memories are the user's file
    user_md = (home / "memories.md").read_text(encoding="utf-8")
    assert "### 用户偏好\n- " in user_md and "snake_case" in user_md.split("### 用户偏好")[1].split("###")[0]
    assert "### 纠正反馈\n- " in user_md and "Python" in user_md.split("### 纠正反馈")[1]
    assert user_md.index("### 用户偏好") < user_md.index("### 纠正反馈")  # the seed's order
    # Regenerated, not appended to: the view changes with the memories, the marker once.
    ok(home, "forget", "--project", key, "docs")
    again = (proj / ".mewcode" / "memories.md").read_text(encoding="utf-8")
    assert again.count(START) == 1 and "参考资料" not in again and "uv" in again


def test_a_home_that_is_not_mewcodes_gets_no_memories_md(tmp_path: Path) -> None:
    home, proj, key = mew_home(tmp_path, name="deep")
    assert not is_mewcode_home(home)
    ok(home, "remember", "--project", key, "--type", "project", "--name", "uv", "使用 uv 作为包管理器")
    ok(home, "remember", "--global", "--type", "user", "--name", "naming", "变量命名用 snake_case")
    assert not (proj / ".mewcode" / "memories.md").exists() and not (home / "memories.md").exists()
    (home / "MEWCODE.md").write_text("# 指令\n")  # MewCode's own user instructions mark its home
    assert is_mewcode_home(home)


def test_a_memories_md_a_person_wrote_is_kept_and_the_write_undone(tmp_path: Path) -> None:
    home, proj, key = mew_home(tmp_path)
    theirs = "### 用户偏好\n- 我自己写的：提交信息用英文\n"
    target = proj / ".mewcode" / "memories.md"
    target.write_text(theirs, encoding="utf-8")
    ok(home, "remember", "--project", key, "--type", "project", "--name", "uv", "使用 uv 作为包管理器")
    text = target.read_text(encoding="utf-8")
    assert text.startswith(theirs) and START in text and "uv" in text  # their text byte for byte, memd's beside it
    runs = json.loads(ok(home, "history", "--project", key, "--json"))
    run = next(r for r in runs if "memories.md" in json.dumps(r.get("changes") or r))
    ok(home, "undo", "--project", key, run["run"])
    assert target.read_text(encoding="utf-8") == theirs


def test_lines_put_inside_memds_block_are_kept() -> None:
    block = render_block([], "/m")
    text, foreign = merge(None, block)
    assert not foreign and merge(text, block) == (text, False)  # memd's own file: rewritten as it is
    edited = text.replace(block[1], block[1] + "\n- 一条手写的记忆")
    again, foreign = merge("前言\n" + edited + "尾声\n", block)
    assert foreign and again.startswith("前言\n" + START) and "- 一条手写的记忆\n" in again and again.endswith("尾声\n")


def test_recall_reads_the_projects_own_mewcode_memory_directory(tmp_path: Path) -> None:
    home, proj, key = mew_home(tmp_path)
    mem = proj / ".mewcode" / "memory"
    mem.mkdir()
    (mem / "deploy.md").write_text("---\nname: 部署流程\ndescription: Deploy to staging with make deploy-staging\n"
                                   "type: project\n---\n\nRun make deploy-staging from the repo root.\n")  # fmt: skip
    (mem / "MEMORY.md").write_text("- not a memory\n")
    ok(home, "run-now", "index", "--project", key)
    hits = json.loads(ok(home, "recall", "--project", key, "--json", "how do I deploy to staging"))
    assert [h["file"] for h in hits] == [str(mem / "deploy.md")], hits
    found = json.loads(ok(home, "search", "--project", key, "--json", "staging"))
    assert any(h["file"] == str(mem / "deploy.md") for h in (found if isinstance(found, list) else found["hits"]))


def test_memd_init_takes_a_sessions_title_from_its_meta(tmp_path: Path) -> None:
    home, proj, _key = mew_home(tmp_path)
    draft = json.loads(ok(home, "init", str(proj), "--json"))
    assert draft["file"] == str(proj / "MEWCODE.md") and draft["inputs"]["summaries"] == ["lint and deploy"]
