"""`memd mcp`'s own stdio loop (issue 22 point 6, issue 23): it answers `initialize` and
`tools/list` without the SDK, exactly as the SDK would, and hands tool calls to the SDK's server;
parallel `remember` calls from one client all land.

The client is the official SDK's (`mcp.client.Client` over stdio against a real `memd mcp`
process), as in tests/agent/test_mcp_server.py.
"""

from __future__ import annotations

import io
import json
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from memd.agent import mcpwire
from memd.agent.mcp_schema import TOOLS
from memd.memory.scan import scan_dir
from memd.tree import Home
from tests.agent.test_mcp_server import data, serve, world  # noqa: F401 - the fixture
from tests.conftest import memd_cmd
from tests.procs import memd_env


def test_the_tool_list_is_what_the_sdk_derives() -> None:
    """The literal `tools/list` answers from is regenerated, not hand-kept: equal to the SDK's view."""
    assert (Path(mcpwire.__file__).with_name("mcp_schema.py")).read_text() == mcpwire.schema_source(), (
        "regenerate: python -m memd.agent.mcpwire --schema")
    assert [t["name"] for t in TOOLS] == ["search_memory", "read_memory", "list_memories", "recall", "remember",
                                          "forget"]  # fmt: skip


def test_protocol_versions_are_the_sdks() -> None:
    from mcp.server.runner import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION  # noqa: PLC0415 - the SDK

    assert tuple(HANDSHAKE_PROTOCOL_VERSIONS) == mcpwire.PROTOCOL_VERSIONS and mcpwire.LATEST == LATEST_HANDSHAKE_VERSION


def _exchange(lines: list[bytes], calls: Any = None) -> list[dict[str, Any]]:
    out = io.BytesIO()
    wire = mcpwire.Wire(io.BytesIO(b"".join(lines)), out, "9.9", calls or (lambda: None), warm=False)
    wire.serve()
    return [json.loads(x) for x in out.getvalue().splitlines()]


def _msg(**m: Any) -> bytes:
    return (json.dumps({"jsonrpc": "2.0", **m}) + "\n").encode()


def test_the_loop_answers_without_the_sdk_and_refuses_bad_lines() -> None:
    got = _exchange([
        _msg(id=1, method="initialize", params={"protocolVersion": "2025-06-18", "capabilities": {}}),
        _msg(method="notifications/initialized"),
        _msg(id=2, method="tools/list"),
        _msg(id="p", method="ping"),
        b"{not json\n",
        b"[1, 2]\n",
        _msg(id=3, method="sampling/createMessage"),
        _msg(id=4, method="tools/call", params={"arguments": {}}),
        _msg(id=5, method="tools/call", params={"name": "list_memories", "arguments": [1]}),
        _msg(id=6, method="initialize", params={"protocolVersion": "1999-01-01"}),
    ])  # fmt: skip
    by_id = {m.get("id"): m for m in got if m.get("id") is not None}
    assert by_id[1]["result"]["protocolVersion"] == "2025-06-18" and by_id[1]["result"]["serverInfo"]["version"] == "9.9"
    assert by_id[1]["result"]["capabilities"] == {"tools": {"listChanged": False}}
    assert by_id[2]["result"]["tools"] == TOOLS and by_id["p"]["result"] == {}
    assert [m["error"]["code"] for m in got if m.get("id") is None] == [-32700, -32600]
    assert by_id[3]["error"]["code"] == -32601
    assert by_id[4]["error"]["code"] == -32602 and by_id[5]["error"]["code"] == -32602
    assert by_id[6]["result"]["protocolVersion"] == mcpwire.LATEST
    assert len(got) == 9  # the notification got no answer


def test_a_tool_call_is_answered_even_when_the_server_cannot_be_built() -> None:
    def broken() -> Any:
        raise RuntimeError("no home")

    got = _exchange([_msg(id=7, method="tools/call", params={"name": "list_memories"})], broken)
    assert got == [{"jsonrpc": "2.0", "id": 7, "error": {"code": -32603, "message": "RuntimeError: no home"}}]


def test_initialize_and_tools_list_import_no_sdk(tmp_path: Path) -> None:
    """The point of the loop: `memd mcp` answers both before (and without) importing `mcp` or pydantic."""
    probe = ("import sys, io, json\n"
             "from memd.agent import mcpwire\n"
             "lines = [json.dumps({'jsonrpc': '2.0', 'id': 1, 'method': 'initialize', 'params': {}}),\n"
             "         json.dumps({'jsonrpc': '2.0', 'id': 2, 'method': 'tools/list'})]\n"
             "out = io.BytesIO()\n"
             "mcpwire.Wire(io.BytesIO(('\\n'.join(lines) + '\\n').encode()), out, 'x', lambda: None, warm=False).serve()\n"
             "assert len(out.getvalue().splitlines()) == 2\n"
             "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'pydantic', 'anyio', 'click', 'structlog'))\n"
             "print(json.dumps(heavy))\n")  # fmt: skip
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=memd_env(), check=True)
    assert json.loads(r.stdout) == []


def test_two_hundred_parallel_remember_calls_from_one_client_all_land(world: tuple[Home, Path, str]) -> None:  # noqa: F811
    """Issue 23: 66 of 200 concurrent `remember` calls failed with "lock busy … held by another memd
    process", the holder being the server itself. Its writes are serialised now: 0 failures."""
    home, proj, key = world
    n = 200

    async def body(c: Any) -> list[Any]:
        results: list[Any] = [None] * n

        async def one(i: int) -> None:
            results[i] = await c.call_tool("remember", {
                "name": f"fact-{i:03d}", "description": f"fact number {i}", "body": f"Fact {i} holds.",
                "type": "project"})  # fmt: skip

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(one, i)
        return results

    results = serve(home, proj, body)
    failed = [r.content[0].text for r in results if r.is_error]
    assert failed == [], failed[:3]
    assert all(data(r)["added"] == 1 for r in results)
    names = {m.name for m in scan_dir(home.project_memory(key), "project", key).memories}
    assert {f"fact-{i:03d}" for i in range(n)} <= names
    index = (home.project_memory(key) / "MEMORY.md").read_text()
    assert all(f"[fact-{i:03d}](fact-{i:03d}.md)" in index for i in range(n))


def _child_cpu() -> float:
    """CPU seconds of this process's reaped children so far (user + system)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


@pytest.mark.slow
def test_tools_list_within_four_bare_interpreter_starts(world: tuple[Home, Path, str]) -> None:  # noqa: F811
    """Claude Code's print mode waits about 2 s for MCP servers (SPEC §11.1). From spawn to the
    `tools/list` answer, `memd mcp` spends at most 4× the CPU of a bare `python -c pass` of the same
    interpreter, best of 5 each, interleaved. CPU, not wall time: on CI's loaded cores a wall-time
    bound failed with the same code (139 ms against a 32 ms floor in one run, 46 ms alone); the
    wall-time p50/p95 are bench/bench_mcp_start.py's. Loading the SDK (~0.7 s of CPU) still fails it."""
    home, proj, _key = world
    msgs = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
             "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]  # fmt: skip
    floor, serve = [], []
    for _ in range(5):
        c = _child_cpu()
        subprocess.run([sys.executable, "-c", "pass"], check=True, env=memd_env())
        floor.append(_child_cpu() - c)
        c = _child_cpu()
        p = subprocess.Popen([*memd_cmd(), "--home", str(home.root), "mcp"], cwd=proj, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=memd_env())  # fmt: skip
        assert p.stdin and p.stdout
        p.stdin.write("".join(json.dumps(m) + "\n" for m in msgs).encode())
        p.stdin.flush()
        p.stdout.readline()
        tools = json.loads(p.stdout.readline())["result"]["tools"]
        p.kill()  # idle on stdin after its answer: its CPU so far is the start-up's
        p.wait()
        serve.append(_child_cpu() - c)
        assert len(tools) == 6
    assert min(serve) <= 4 * min(floor), (serve, floor)


def test_the_servers_writes_queue_on_each_other_not_on_the_memory_lock(world: tuple[Home, Path, str]) -> None:  # noqa: F811
    """Whatever runs the tools concurrently (the loop's workers, the SDK's thread pool), a write of
    this server never times out on the memory lock another of its own writes holds: with the
    shortest lock wait (1 s) and 64 writes at once, none fails."""
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    from memd.agent.mcp import Tools  # noqa: PLC0415

    home, _proj, key = world
    (home.root / "settings.json").write_text(json.dumps({"memd": {"provider": "offline", "lockTimeoutSeconds": 1}}))
    tools = Tools(home, key)

    def one(i: int) -> str:
        try:
            tools.remember(f"fact-{i:02d}", f"fact {i}", f"Fact {i} holds.", "project", "project")
            return ""
        except Exception as exc:
            return str(exc)

    with ThreadPoolExecutor(max_workers=64) as pool:
        failures = [f for f in pool.map(one, range(64)) if f]
    assert failures == [], failures[:3]
    assert len(list(home.project_memory(key).glob("fact-*.md"))) == 64
