"""`memd mcp` driven by the official SDK's own client over stdio, as any MCP client drives it.

One server process per test, started in a git project: reads (search, read, list,
recall), writes through extraction's path (validation, redaction, the scope's lock,
atomic files, MEMORY.md + drawer render + search within a second, a history run
that `memd undo` reverts), and hostile input answered with MCP tool errors.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from memd.index.refresh import refresh_all
from memd.index.search import open_readonly, query_index
from memd.keys import project_key
from memd.memory.file import render_memory, write_memory
from memd.tree import Home
from tests.conftest import memd_cmd
from tests.procs import memd_env, run_memd

DAY = 86_400
TOOLS = {"search_memory", "read_memory", "list_memories", "recall", "remember", "forget"}


@pytest.fixture
def world(tmp_path: Path) -> tuple[Home, Path, str]:
    home = Home(tmp_path / "home")
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / ".git").mkdir()
    key = project_key(proj)
    write_memory(home.global_memory, "prefers-tabs", render_memory("prefers-tabs", "the user indents with tabs",
                                                                   "user", "Tabs, never spaces."))  # fmt: skip
    p = write_memory(home.project_memory(key), "deploy-fridays",
                     render_memory("deploy-fridays", "deploys happen only on Fridays", "project",
                                   "Run make deploy on Fridays only."))  # fmt: skip
    os.utime(p, (time.time() - 3 * DAY, time.time() - 3 * DAY))
    (home.root / "settings.json").write_text(json.dumps({"memd": {"provider": "offline"}}))
    refresh_all(home)
    return home, proj, key


def serve(home: Home, proj: Path, body: Callable[[Client], Awaitable[Any]]) -> Any:
    """Run `body` against a `memd mcp` process started in `proj` (the SDK's stdio client)."""
    cmd = memd_cmd()
    params = StdioServerParameters(command=cmd[0], args=[*cmd[1:], "--home", str(home.root), "mcp"], cwd=str(proj),
                                   env={k: v for k, v in memd_env().items() if k in ("PATH", "HOME", "LANG")})  # fmt: skip

    async def main() -> Any:
        async with Client(params) as client:
            return await body(client)

    return anyio.run(main)


def data(result: Any) -> Any:
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


def error(result: Any) -> str:
    assert result.is_error, result.content
    return str(result.content[0].text)


def test_tools_and_reads(world: tuple[Home, Path, str]) -> None:
    home, proj, key = world

    async def body(c: Client) -> dict[str, Any]:
        tools = await c.list_tools()
        return {
            "tools": {t.name for t in tools.tools},
            "search": data(await c.call_tool("search_memory", {"query": "deploy"})),
            "global": data(await c.call_tool("search_memory", {"query": "tabs", "scope": "global"})),
            "project_only": data(await c.call_tool("search_memory", {"query": "tabs", "scope": "project"})),
            "read": data(await c.call_tool("read_memory", {"name": "deploy-fridays"})),
            "list": data(await c.call_tool("list_memories", {})),
            "recall": data(await c.call_tool("recall", {"query": "how do we deploy?"})),
            "recall_none": data(await c.call_tool("recall", {"query": "what about the weather"})),
        }

    out = serve(home, proj, body)
    assert out["tools"] == TOOLS
    [hit] = out["search"]["hits"]
    assert hit["name"] == "deploy-fridays" and hit["type"] == "project" and hit["scope"] == "project"
    assert hit["age"] == "3 days old" and hit["stale"].startswith("This memory is 3 days old.")
    assert "Fridays" in hit["snippet"] and hit["file"] == str(home.project_memory(key) / "deploy-fridays.md")
    assert [h["name"] for h in out["global"]["hits"]] == ["prefers-tabs"] and out["project_only"]["hits"] == []
    assert out["read"]["body"] == "Run make deploy on Fridays only." and out["read"]["age"] == "3 days old"
    assert {(m["name"], m["scope"]) for m in out["list"]["memories"]} == {("deploy-fridays", "project"),
                                                                          ("prefers-tabs", "global")}  # fmt: skip
    assert [m["name"] for m in out["recall"]["memories"]] == ["deploy-fridays"]
    assert out["recall"]["memories"][0]["body"] == "Run make deploy on Fridays only."
    assert out["recall_none"]["memories"] == []


def test_remember_and_forget_go_through_the_write_path(world: tuple[Home, Path, str]) -> None:
    home, proj, key = world
    secret = "sk-ant-api03-" + "a1B2c3D4e5" * 8
    stamps: dict[str, float] = {}

    async def body(c: Client) -> dict[str, Any]:
        data(await c.call_tool("list_memories", {}))  # the SDK is imported for the first call: not the write's time
        t = time.monotonic()
        added = data(await c.call_tool("remember", {
            "name": "release-train", "description": "releases leave on the Tuesday train",
            "body": f"Releases ship on Tuesdays. The CI token is {secret}.", "type": "project"}))  # fmt: skip
        stamps["remember"] = time.monotonic() - t
        glob = data(await c.call_tool("remember", {"name": "terse-answers", "description": "short answers",
                                                   "body": "The user wants short answers.", "type": "feedback",
                                                   "scope": "global"}))  # fmt: skip
        found = data(await c.call_tool("search_memory", {"query": "Tuesday"}))
        gone = data(await c.call_tool("forget", {"name": "deploy-fridays"}))
        return {"added": added, "global": glob, "found": found, "gone": gone}

    out = serve(home, proj, body)
    assert out["added"]["added"] == 1 and out["added"]["redacted"] and out["added"]["undo"].startswith("memd undo ")
    assert stamps["remember"] < 1.0  # written, indexed and searchable within a second
    path = home.project_memory(key) / "release-train.md"
    text = path.read_text()
    assert "Releases ship on Tuesdays" in text and secret not in text and "[REDACTED" in text
    assert "[release-train](release-train.md)" in (home.project_memory(key) / "MEMORY.md").read_text()
    assert "terse-answers" in home.drawer_render.read_text() and out["global"]["added"] == 1
    assert [h["name"] for h in out["found"]["hits"]] == ["release-train"]
    assert out["gone"]["deleted"] == 1 and not (home.project_memory(key) / "deploy-fridays.md").exists()
    conn = open_readonly(home.search_db)
    assert [h.name for h in query_index(conn, "Fridays", project_key=key)] == []
    conn.close()
    # each write is one history run: undo brings the forgotten memory back; the remember's run removes the new one
    r = run_memd(home.root, "undo", "--project", key)
    assert r.returncode == 0, r.stderr
    assert (home.project_memory(key) / "deploy-fridays.md").exists()
    r = run_memd(home.root, *out["added"]["undo"].split()[1:])
    assert r.returncode == 0, r.stderr
    assert not path.exists() and "release-train" not in (home.project_memory(key) / "MEMORY.md").read_text()


def test_bad_input_is_an_mcp_error_and_writes_nothing_outside(world: tuple[Home, Path, str], tmp_path: Path) -> None:
    home, proj, key = world
    before = sorted(p for p in tmp_path.rglob("*") if "memd" not in p.parts)

    async def body(c: Client) -> list[str]:
        calls: list[tuple[str, dict[str, Any]]] = [
            ("no_such_tool", {}),
            ("search_memory", {"query": 42}),
            ("search_memory", {"query": "x" * 100_000}),
            ("search_memory", {"query": "tabs", "limit": "many"}),
            ("search_memory", {"query": "tabs", "scope": "../../etc"}),
            ("read_memory", {"name": "../../../etc/passwd"}),
            ("read_memory", {"name": "~/.ssh/id_rsa"}),
            ("read_memory", {"name": "no-such-memory"}),
            ("forget", {"name": "../memory/prefers-tabs"}),
            ("remember", {"name": "../../escape", "description": "d", "body": "b", "type": "project"}),
            ("remember", {"name": "/etc/cron.d/x", "description": "d", "body": "b", "type": "project"}),
            ("remember", {"name": "ok-name", "description": "d", "body": "b" * 20_000, "type": "project"}),
            ("remember", {"name": "ok-name", "description": "d", "body": "b", "type": "secret-type"}),
            ("remember", {"name": "ok-name", "description": "line\nbreak" * 100, "body": "b", "type": "project"}),
            ("remember", {"name": "ok-name"}),
            ("remember", {"name": "x\x00y", "description": "d", "body": "b", "type": "project"}),
        ]
        return [error(await c.call_tool(name, args)) for name, args in calls]

    errors = serve(home, proj, body)
    assert all("Traceback" not in e for e in errors), errors
    assert "Unknown tool" in errors[0]
    assert "looks like a path" in errors[5] and "looks like a path" in errors[6] and "no memory named" in errors[7]
    assert "looks like a path" in errors[9] and "looks like a path" in errors[10]
    after = sorted(p for p in tmp_path.rglob("*") if "memd" not in p.parts)
    assert after == before
    assert sorted(p.name for p in home.project_memory(key).iterdir()) == ["MEMORY.md", "deploy-fridays.md"]
