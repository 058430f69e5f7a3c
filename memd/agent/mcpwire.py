"""`memd mcp`'s stdio loop: JSON-RPC 2.0 over newline-delimited JSON (MCP's stdio transport).

Why not the SDK's own loop: importing the `mcp` SDK (pydantic, anyio, …) takes half a second
on an idle machine and seconds on a busy one, and Claude Code's print mode waits about 2 s for
a server (SPEC §11.1): a slower server's tools are left out of the session. This loop answers
`initialize`, `ping` and `tools/list` with the standard library and a literal
(`memd.agent.mcp_schema.TOOLS`, kept equal to what the SDK derives by a test), and leaves the
SDK to the first `tools/call`: the call goes to `memd.agent.mcp.build`'s server (`call_tool`),
so arguments are validated and failures reported exactly as the SDK does. Once `tools/list` is
answered, a background thread imports the SDK so the first call does not wait for it.

Invariants:
* one JSON object per line out, written whole under a lock (calls answer from worker threads);
* a request gets exactly one response; a notification none; an unknown method
  -32601; a line that is not JSON -32700 (id null);
* calls run on a few worker threads; the server's writes are serialised in
  `memd.agent.mcp.Tools` (one process-wide lock), so parallel `remember` calls from one
  client queue instead of failing on the memory lock held by this very process;
* at end of input, calls in flight finish and are answered before the process exits.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

# The protocol versions the SDK (2.3) negotiates in `initialize`; the latest when the client asks
# for another. tests/agent/test_mcp_wire.py keeps these equal to the SDK's.
PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST = "2025-11-25"
WORKERS = 4
INSTRUCTIONS = """memd keeps this user's long-term memory: the global drawer (cross-project
preferences and ways of working) and this project's memory (decisions and constraints).
Use search_memory to find what is known about a topic, read_memory for a memory's full
text, recall for the few memories most relevant to a question. Memories are point-in-time
observations: one more than a day old may be outdated; verify it against the current code.
Use remember only for durable facts the user wants kept (preferences, corrections, project
decisions that the code does not show), and forget when the user asks."""

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603


def initialize_result(params: Any, version: str) -> dict[str, Any]:
    """What the SDK answers to `initialize` (pure): the negotiated version, tools only."""
    asked = params.get("protocolVersion") if isinstance(params, dict) else None
    return {
        "protocolVersion": asked if asked in PROTOCOL_VERSIONS else LATEST,
        "capabilities": {"tools": {"listChanged": False}},
        "serverInfo": {"name": "memd", "version": version},
        "instructions": INSTRUCTIONS,
    }


class Wire:
    """One connection: reads requests from `inp`, writes responses to `out`.

    `calls` answers a `tools/call` (name, arguments) with the result as JSON data, or raises
    `RpcError`; it is built on the first call, or in the background once `tools/list` is answered
    (`warm`): that is where the SDK is imported."""

    def __init__(self, inp: IO[bytes], out: IO[bytes], version: str, calls: Callable[[], Any],
                 warm: bool = True) -> None:  # fmt: skip
        self.inp, self.out, self.version = inp, out, version
        self._make_calls, self._warm = calls, warm
        self._calls: Any = None
        self._calls_lock = threading.Lock()
        self._out_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    # ------------------------------------------------------------ output

    def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass") + b"\n"
        with self._out_lock:
            try:
                self.out.write(data)
                self.out.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass  # the client is gone; nothing to tell it

    def reply(self, rid: Any, result: dict[str, Any]) -> None:
        self.send({"jsonrpc": "2.0", "id": rid, "result": result})

    def error(self, rid: Any, code: int, message: str, data: Any = None) -> None:
        err: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            err["data"] = data
        self.send({"jsonrpc": "2.0", "id": rid, "error": err})

    # ------------------------------------------------------------ the loop

    def serve(self) -> None:
        try:
            for line in self.inp:
                if line.strip():
                    self.handle(line)
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)

    def handle(self, line: bytes) -> None:
        try:
            msg = json.loads(line)
        except ValueError:
            self.error(None, PARSE_ERROR, "Parse error")
            return
        if not isinstance(msg, dict):
            self.error(None, INVALID_REQUEST, "Invalid Request: one JSON object a line")
            return
        method, rid, params = msg.get("method"), msg.get("id"), msg.get("params")
        if not isinstance(method, str):
            if "id" in msg and ("result" in msg or "error" in msg):
                return  # a response to a request of ours: we send none
            self.error(rid, INVALID_REQUEST, "Invalid Request: no method")
            return
        if "id" not in msg:
            return  # a notification (initialized, cancelled, …): nothing to answer
        if method == "initialize":
            self.reply(rid, initialize_result(params, self.version))
        elif method == "ping":
            self.reply(rid, {})
        elif method == "tools/list":
            from memd.agent.mcp_schema import TOOLS  # noqa: PLC0415 - start-up

            self.reply(rid, {"tools": TOOLS})
            self._start_warming()
        elif method == "tools/call":
            self._submit(rid, params)
        elif method in ("prompts/list", "resources/list", "resources/templates/list"):
            key = {"prompts/list": "prompts", "resources/list": "resources"}.get(method, "resourceTemplates")
            self.reply(rid, {key: []})
        else:
            self.error(rid, METHOD_NOT_FOUND, f"Method not found: {method}")

    def _start_warming(self) -> None:
        """Import the SDK and build the server in the background, once, after `tools/list`."""
        if self._warm:
            self._warm = False
            threading.Thread(target=self._warm_up, name="memd-mcp-warm", daemon=True).start()

    def _warm_up(self) -> None:
        try:  # at a low priority: the agent is still starting beside us, and needs the cores more
            import os  # noqa: PLC0415 - start-up

            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)  # Linux: per thread
        except (AttributeError, OSError):
            pass
        try:
            self._get_calls()
        except Exception as exc:  # the first call will meet it again, and answer it
            sys.stderr.write(f"memd mcp: {type(exc).__name__}: {exc}\n")

    def _get_calls(self) -> Any:
        with self._calls_lock:
            if self._calls is None:
                self._calls = self._make_calls()
            return self._calls

    def _submit(self, rid: Any, params: Any) -> None:
        if not isinstance(params, dict) or not isinstance(params.get("name"), str):
            self.error(rid, INVALID_PARAMS, "Invalid params: tools/call needs a tool name")
            return
        args = params.get("arguments")
        if args is None:
            args = {}
        if not isinstance(args, dict):
            self.error(rid, INVALID_PARAMS, "Invalid params: arguments must be an object")
            return
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415 - start-up

            self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="memd-mcp")
        self._pool.submit(self._call, rid, params["name"], args)

    def _call(self, rid: Any, name: str, args: dict[str, Any]) -> None:
        try:
            result = self._get_calls()(name, args)
        except RpcError as exc:
            self.error(rid, exc.code, exc.message, exc.data)
            return
        except Exception as exc:  # a bug of ours: one line to the client, never a silent hang
            self.error(rid, INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
            return
        self.reply(rid, result)


class RpcError(Exception):
    """A JSON-RPC error for the client (the SDK's `MCPError`, passed through)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


def sdk_calls(home: Any, project_key: str) -> Callable[[str, dict[str, Any]], dict[str, Any]]:
    """`tools/call` through the SDK server memd.agent.mcp builds: its validation, its errors."""
    import asyncio  # noqa: PLC0415 - start-up

    from mcp.shared.exceptions import MCPError  # noqa: PLC0415 - start-up
    from mcp.types import CallToolResult, TextContent  # noqa: PLC0415 - start-up

    from memd.agent.mcp import build  # noqa: PLC0415 - start-up

    server = build(home, project_key)

    def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
        try:
            result = asyncio.run(server.call_tool(name, args))
        except MCPError as exc:
            raise RpcError(exc.error.code, exc.error.message, exc.error.data) from None
        except Exception as exc:  # ToolError and the rest: a tool error, as the SDK's handler makes it
            result = CallToolResult(content=[TextContent(type="text", text=str(exc))], is_error=True)
        dumped: dict[str, Any] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        return dumped

    return call


def project_of_cwd() -> str:
    """The project of the server: `$CLAUDE_PROJECT_DIR`, else the directory the client started it in."""
    import os  # noqa: PLC0415 - start-up

    from memd.keys import project_key  # noqa: PLC0415 - start-up

    return project_key(os.environ.get("CLAUDE_PROJECT_DIR") or os.getcwd())


def serve(home: Any, inp: IO[bytes] | None = None, out: IO[bytes] | None = None) -> None:
    """Serve memd's tools for `home` and the project on stdin/stdout until the client closes stdin.
    The project is found at the first call (git, for the canonical root), not before `initialize`."""
    from memd import __version__  # noqa: PLC0415 - start-up

    def make() -> Callable[[str, dict[str, Any]], dict[str, Any]]:
        return sdk_calls(home, project_of_cwd())

    Wire(inp or sys.stdin.buffer, out or sys.stdout.buffer, __version__, make).serve()


def schema_source() -> str:
    """The text of memd/agent/mcp_schema.py, from the SDK's view of `memd.agent.mcp.build`."""
    import asyncio  # noqa: PLC0415 - start-up
    import pprint  # noqa: PLC0415 - start-up
    from pathlib import Path  # noqa: PLC0415 - start-up

    from memd.agent.mcp import build  # noqa: PLC0415 - start-up
    from memd.agent.mcp_schema import __doc__ as doc  # noqa: PLC0415 - start-up
    from memd.tree import Home  # noqa: PLC0415 - start-up

    server = build(Home(Path("/nonexistent")), "k")
    tools = [t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in asyncio.run(server.list_tools())]
    body = pprint.pformat(tools, width=116, sort_dicts=False)
    return f'"""{doc}"""\n\nfrom typing import Any\n\nTOOLS: list[dict[str, Any]] = {body}\n'


if __name__ == "__main__":  # python -m memd.agent.mcpwire --schema: regenerate memd/agent/mcp_schema.py
    if sys.argv[1:] == ["--schema"]:
        from pathlib import Path

        Path(__file__).with_name("mcp_schema.py").write_text(schema_source(), encoding="utf-8")
    else:
        sys.exit("usage: python -m memd.agent.mcpwire --schema")
