"""`memd mcp`: the seed's SearchMemory and its siblings as a stdio MCP server (SPEC §11).

Built on the official `mcp` SDK (`MCPServer`): tool schemas come from the
signatures below, arguments are validated by the SDK before a tool runs, and
a tool's failure reaches the client as an MCP tool error (`isError`), never as
a traceback. Each tool is a thin call into what the CLI already uses:

* reads — `search_memory` (FTS5, `memd.index.search.query_index`), `read_memory`,
  `list_memories` (the memory files), `recall` (§7b.1, `memd.agent.recall`) — open
  the search database read-only and never take a lock;
* writes — `remember`, `forget` — go exactly the way extraction's do: the
  operation is validated and redacted (`memd.memory.operations`), the scope's lock
  is taken, and `memd.write.apply.apply` writes atomically, refreshes `MEMORY.md`,
  the drawer render and the search rows, and records a history run, so
  `memd undo` reverts it. Review mode and read-only memory apply as for any
  write.

The project is the one of the server's working directory (Claude Code starts
stdio servers in the session's directory), or `$CLAUDE_PROJECT_DIR`.
Names are never paths: a name with a separator, `..` or a leading `~` is refused.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field

from memd.agent.mcpwire import INSTRUCTIONS
from memd.tree import Home, Place

MAX_QUERY = 1000
MAX_NAME = 200
MAX_DESCRIPTION = 300
MAX_BODY = 8 * 1024
MAX_LISTED = 500
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

QUERY_HELP = 'Words to look for (FTS5 syntax works: deplo*, "exact phrase", a OR b).'
DESCRIPTION_HELP = "One line: what this memory is about."
BODY_HELP = "The memory itself; say why, and how to apply it."
TYPE_HELP = ("user: who the user is; feedback: corrections of, or guidance on, the way of working; "
             "project: decisions and constraints the code does not show; reference: pointers to outside resources.")

Scope = Literal["all", "project", "global"]
WriteScope = Literal["project", "global"]
MemoryType = Literal["user", "feedback", "project", "reference"]
F = TypeVar("F", bound=Callable[..., Any])


class Tools:
    """The tools' work, one home and one project; every method returns plain JSON data or raises ToolError."""

    def __init__(self, home: Home, project_key: str, now: Callable[[], datetime] | None = None) -> None:
        from memd.clock import system_clock

        self.home = home
        self.key = project_key
        self.now = now or system_clock

    # ---------------------------------------------------------------- helpers

    @staticmethod
    def fail(message: str) -> Exception:
        from mcp.server.mcpserver.exceptions import ToolError

        return ToolError(message)

    def _settings(self) -> Any:
        from memd import settings as st

        return st.load(self.home.settings_file)

    def _check_name(self, name: str) -> str:
        text = " ".join(name.split())
        if not text:
            raise self.fail("empty name")
        if _CONTROL.search(name):
            raise self.fail("a name holds no control characters")
        if "/" in text or "\\" in text or ".." in text or text.startswith("~"):
            raise self.fail(f"{text[:80]!r} looks like a path; give a memory's name (see list_memories)")
        return text

    def _age(self, mtime: float) -> dict[str, Any]:
        from memd.agent.hooks import age_label
        from memd.index.staleness import staleness_note

        now = self.now()
        return {"age": age_label(mtime, now), "stale": staleness_note(mtime, now)}

    def _memories(self, scope: str) -> list[Any]:
        from memd.memory.scan import scan_dir

        out: list[Any] = []
        if scope in ("all", "project"):
            out += scan_dir(self.home.project_memory(self.key), "project", self.key).memories
        if scope in ("all", "global"):
            out += scan_dir(self.home.global_memory, "global", None).memories
        return out

    def _row(self, m: Any) -> dict[str, Any]:
        return {"name": m.name, "type": m.type, "scope": m.scope, "description": m.description,
                "file": str(m.path), **self._age(m.mtime)}  # fmt: skip

    def _find(self, name: str, scope: str) -> Any:
        wanted = self._check_name(name)
        found = [m for m in self._memories(scope) if wanted in (m.name, m.path.name, m.path.stem)]
        if not found:
            raise self.fail(f"no memory named {wanted!r} in {self._where(scope)} (see list_memories)")
        return min(found, key=lambda m: m.scope != "project")  # the project's wins, as in `memd show`

    def _where(self, scope: str) -> str:
        return {"all": "this project or the global drawer", "project": "this project",
                "global": "the global drawer"}[scope]  # fmt: skip

    # ---------------------------------------------------------------- reads

    def search(self, query: str, scope: str, limit: int) -> dict[str, Any]:
        import sqlite3

        from memd.index.search import open_readonly, query_index

        if not query.strip():
            raise self.fail("empty query")
        if not self.home.search_db.exists():
            return {"hits": [], "note": "memd has not indexed this home yet (it does once `memd run` runs)"}
        conn = open_readonly(self.home.search_db)
        try:
            hits = query_index(conn, query, project_key=None if scope == "global" else self.key,
                               limit=limit if scope != "project" else limit * 4)  # fmt: skip
        except sqlite3.Error as exc:
            raise self.fail(f"search failed: {exc}") from None
        finally:
            conn.close()
        if scope == "project":
            hits = [h for h in hits if h.scope == "project"][:limit]
        return {"hits": [{"name": h.name, "type": h.type, "scope": h.scope, "description": h.description,
                          "snippet": h.snippet, "file": str(self.home.root / h.file), **self._age(h.mtime)}
                         for h in hits]}  # fmt: skip

    def read(self, name: str, scope: str) -> dict[str, Any]:
        m = self._find(name, scope)
        return {**self._row(m), "body": m.body}

    def list(self, scope: str) -> dict[str, Any]:
        mems = sorted(self._memories(scope), key=lambda m: (m.scope != "project", m.type, m.name))
        out: dict[str, Any] = {"memories": [self._row(m) for m in mems[:MAX_LISTED]]}
        if len(mems) > MAX_LISTED:
            out["note"] = f"{len(mems) - MAX_LISTED} more not listed; use search_memory"
        return out

    def recall(self, query: str) -> dict[str, Any]:
        from memd import settings as st
        from memd.agent.hooks import QUIET
        from memd.agent.recall import recall
        from memd.index.search import open_readonly
        from memd.job.context import make_context

        if not query.strip():
            raise self.fail("empty query")
        if not self.home.search_db.exists():
            return {"memories": [], "note": "memd has not indexed this home yet"}
        s = self._settings()
        provider, _why = st.effective_provider(s, memd_dir=self.home.memd_dir)
        ctx = make_context(self.home, s, log=QUIET, now=self.now)
        search = open_readonly(self.home.search_db)
        try:
            result = recall(ctx, search, query, project_key=self.key, bodies=True, provider=provider)
        finally:
            search.close()
            ctx.conn.close()
        out: dict[str, Any] = {"memories": [
            {"name": c.name, "type": c.type, "scope": c.scope, "description": c.description,
             "file": str(self.home.root / c.file), **self._age(c.mtime), "body": c.body} for c in result.memories]}  # fmt: skip
        if result.warning:
            out["note"] = result.warning
        return out

    # ---------------------------------------------------------------- writes

    def _write(self, op: dict[str, Any], job: str, reason: str) -> dict[str, Any]:
        """One operation through extraction's path: validate (and redact), lock, apply, index, history."""
        from memd.agent.hooks import QUIET
        from memd.job.context import make_context
        from memd.locks import acquire
        from memd.memory.operations import validate_operations
        from memd.write import apply as memwrite

        ops, rejected = validate_operations({"operations": [op]})
        if rejected:
            raise self.fail(f"refused: {rejected[0][1]}")
        place = Place.global_() if op["scope"] == "global" else Place.project(self.key)
        s = self._settings()
        # One write at a time in this server: an agent's parallel `remember` calls queue here instead
        # of finding the memory lock "held by another memd process" (this one; issue 23).
        with _WRITES:
            ctx = make_context(self.home, s, log=QUIET, now=self.now)
            try:
                with acquire(self.home, [place], timeout=float(s.memd.lock_timeout_seconds)):
                    applied = memwrite.apply(ctx, self.key, ops, provider="mcp", session_id="mcp", job=job,
                                             reason=reason)  # fmt: skip
            finally:
                ctx.conn.close()
        if applied.refused:
            raise self.fail(f"refused: {applied.refused[0][1]}")
        result: dict[str, Any] = {k: v for k, v in applied.counts().items() if v}
        result["runs"] = applied.runs
        note = getattr(applied, "note", "")
        if note:
            result["note"] = note
        if ops[0].redacted:
            result["redacted"] = list(ops[0].redacted)
        if applied.runs:
            result["undo"] = f"memd undo {applied.runs[0]} " + ("--global" if place.is_global else f"--project {self.key}")
        return result

    def remember(self, name: str, description: str, body: str, type_: str, scope: str) -> dict[str, Any]:
        name = self._check_name(name)
        op = {"op": "add", "scope": scope, "name": name, "description": description, "type": type_, "body": body}
        return self._write(op, "remember", f"remember via MCP: {name}")

    def forget(self, name: str, scope: str) -> dict[str, Any]:
        m = self._find(name, scope)
        op = {"op": "delete", "scope": m.scope, "name": m.name}
        return self._write(op, "forget", f"forget via MCP: {m.name}")


_logs_ready = threading.Event()
_WRITES = threading.Lock()  # the server's own writes, serialised (see Tools._write)


def _quiet_logs() -> None:
    """Warnings to stderr, nothing else: set up at the first call, not before `initialize`
    (structlog costs its import time, and Claude Code gives a server about 2 s to start)."""
    if not _logs_ready.is_set():
        from memd.logs.events import cli_defaults

        cli_defaults()
        _logs_ready.set()


def _guard(tools: Tools, fn: F) -> F:
    """Expected failures stay one line; anything else becomes one line too, never a traceback."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from mcp.server.mcpserver.exceptions import ToolError

        from memd.errors import MemdError

        _quiet_logs()
        try:
            return fn(*args, **kwargs)
        except ToolError:
            raise
        except MemdError as exc:
            raise tools.fail(str(exc)) from None
        except Exception as exc:
            raise tools.fail(f"{type(exc).__name__}: {exc}") from None

    return wrapper  # type: ignore[return-value]


def build(home: Home, project_key: str, now: Callable[[], datetime] | None = None) -> Any:
    """The MCP server with memd's six tools for `home` and the project `project_key`."""
    from mcp.server.mcpserver import MCPServer

    from memd import __version__

    tools = Tools(home, project_key, now)
    server = MCPServer("memd", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")

    def tool(fn: F) -> F:
        server.tool()(_guard(tools, fn))
        return fn

    @tool
    def search_memory(
        query: Annotated[str, Field(min_length=1, max_length=MAX_QUERY, description=QUERY_HELP)],
        scope: Annotated[Scope, Field(description="project, global (the drawer), or all.")] = "all",
        limit: Annotated[int, Field(ge=1, le=50)] = 10,
    ) -> dict[str, Any]:
        """Full-text search over this project's memories and the global drawer, best first:
        each hit with name, type, scope, age, a snippet and the file to Read."""
        return tools.search(query, scope, limit)

    @tool
    def read_memory(
        name: Annotated[str, Field(min_length=1, max_length=MAX_NAME, description="The memory's name or file name.")],
        scope: Scope = "all",
    ) -> dict[str, Any]:
        """One memory's full text, with its type, scope, age and the staleness warning when old."""
        return tools.read(name, scope)

    @tool
    def list_memories(scope: Scope = "all") -> dict[str, Any]:
        """The memories in effect: this project's and the global drawer's (name, type, description, age)."""
        return tools.list(scope)

    @tool
    def recall(
        query: Annotated[str, Field(min_length=1, max_length=MAX_QUERY, description="The question or task.")],
    ) -> dict[str, Any]:
        """At most 5 memories relevant to a question or task, with their full text (none when none is)."""
        return tools.recall(query)

    @tool
    def remember(
        name: Annotated[str, Field(min_length=1, max_length=MAX_NAME, description="A short kebab-case name.")],
        description: Annotated[str, Field(min_length=1, max_length=MAX_DESCRIPTION, description=DESCRIPTION_HELP)],
        body: Annotated[str, Field(min_length=1, max_length=MAX_BODY, description=BODY_HELP)],
        type: Annotated[MemoryType, Field(description=TYPE_HELP)],
        scope: Annotated[WriteScope, Field(description="project (this project) or global (every project).")] = "project",
    ) -> dict[str, Any]:
        """Keep a durable memory (a name already there is updated). Secrets are redacted;
        `memd undo` reverts it."""
        return tools.remember(name, description, body, type, scope)

    @tool
    def forget(
        name: Annotated[str, Field(min_length=1, max_length=MAX_NAME, description="The memory's name or file name.")],
        scope: Scope = "all",
    ) -> dict[str, Any]:
        """Delete one memory (`memd undo` brings it back)."""
        return tools.forget(name, scope)

    return server


def serve(home: Home) -> None:
    """Run the server on stdin/stdout until the client closes it (`memd.agent.mcpwire`'s loop: the
    SDK is imported only for the first tool call, so `initialize` is answered at once)."""
    from memd.agent.mcpwire import serve as serve_wire

    serve_wire(home)
