"""A minimal MCP server over stdio (newline-delimited JSON-RPC 2.0) for tests.

One tool, `echo(text)`, answering `echo: <text>`; every message received is
appended as a JSON line to the file named by `MCP_ECHO_LOG` (if set), so a
test can see that Claude Code started the server and called the tool.
Run: `python tests/e2e/agents/mcp_echo.py`.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

TOOLS = [
    {
        "name": "echo",
        "description": "Echo the given text back.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    }
]


def _log(msg: Any) -> None:
    path = os.environ.get("MCP_ECHO_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(msg) + "\n")


def handle(msg: dict[str, Any]) -> dict[str, Any] | None:
    method = msg.get("method")
    if "id" not in msg:  # a notification
        return None
    if method == "initialize":
        version = (msg.get("params") or {}).get("protocolVersion") or "2025-06-18"
        result: Any = {"protocolVersion": version, "capabilities": {"tools": {}},
                       "serverInfo": {"name": "memd-test-echo", "version": "0.1"}}
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        params = msg.get("params") or {}
        if params.get("name") != "echo":
            return {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32602, "message": "unknown tool"}}
        said = str((params.get("arguments") or {}).get("text", ""))
        result = {"content": [{"type": "text", "text": f"echo: {said}"}], "isError": False}
    elif method == "ping":
        result = {}
    elif method in ("resources/list", "prompts/list", "resources/templates/list"):
        key = {"resources/list": "resources", "prompts/list": "prompts", "resources/templates/list": "resourceTemplates"}[method]
        result = {key: []}
    else:
        return {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": f"no method {method}"}}
    return {"jsonrpc": "2.0", "id": msg["id"], "result": result}


def main() -> int:
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        _log(msg)
        answer = handle(msg) if isinstance(msg, dict) else None
        if answer is not None:
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
