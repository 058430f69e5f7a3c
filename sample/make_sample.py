"""Writes the bundled sample home (memd/sample_home, package data) that `memd demo` copies and runs on.

Synthetic sessions in the Claude Code / deepcode format and one in MewCode's,
written for memd (not copied from any real transcript). Re-run to regenerate:
    python sample/make_sample.py
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
HOME = HERE.parent / "memd" / "sample_home"
PROJECT = "/home/dev/webshop"
KEY = "-home-dev-webshop"
T0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)

SOURCE = "\n".join(
    f"func handler{i}(w http.ResponseWriter, r *http.Request) {{\n\tctx := r.Context()\n\tif err := svc.Step{i}(ctx); err != nil {{\n\t\thttp.Error(w, err.Error(), 500)\n\t\treturn\n\t}}\n\tw.WriteHeader(204)\n}}"
    for i in range(150)
)


class Writer:
    def __init__(self, sid: str, start: datetime) -> None:
        self.sid = sid
        self.t = start
        self.parent: str | None = None
        self.lines: list[str] = []
        self.n = 0

    def _base(self, kind: str) -> dict:
        self.t += timedelta(seconds=20)
        u = str(uuid.UUID(int=hash((self.sid, len(self.lines))) & ((1 << 128) - 1)))
        rec = {"parentUuid": self.parent, "isSidechain": False, "userType": "external", "cwd": PROJECT,
               "sessionId": self.sid, "version": "2.1.40", "gitBranch": "main", "type": kind, "uuid": u,
               "timestamp": self.t.isoformat().replace("+00:00", "Z")}  # fmt: skip
        self.parent = u
        return rec

    def user(self, text: str) -> None:
        rec = self._base("user")
        rec["message"] = {"role": "user", "content": text}
        self.lines.append(json.dumps(rec))

    def command(self, name: str) -> None:
        rec = self._base("user")
        rec["message"] = {"role": "user", "content": f"<command-message>{name[1:]}</command-message>\n<command-name>{name}</command-name>"}
        self.lines.append(json.dumps(rec))

    def assistant(self, text: str | None = None, tools: list[tuple[str, dict]] = ()) -> list[str]:
        self.n += 1
        mid = f"msg_sample_{self.sid[:8]}_{self.n:03d}"
        blocks = ([{"type": "text", "text": text}] if text else []) + [
            {"type": "tool_use", "id": f"toolu_{self.sid[:6]}_{self.n:03d}_{i}", "name": name, "input": inp}
            for i, (name, inp) in enumerate(tools)
        ]
        ids = [b["id"] for b in blocks if b["type"] == "tool_use"]
        for j, b in enumerate(blocks):  # one line per block, sharing the message id, as Claude Code writes
            rec = self._base("assistant")
            rec["message"] = {"model": "claude-sonnet-4-5", "id": mid, "type": "message", "role": "assistant",
                              "content": [b], "stop_reason": "tool_use" if ids else "end_turn",
                              "usage": {"input_tokens": 1200 + 40 * self.n, "output_tokens": 30 + 10 * j,
                                        "cache_creation_input_tokens": 0, "cache_read_input_tokens": 9000}}  # fmt: skip
            self.lines.append(json.dumps(rec))
        return ids

    def results(self, pairs: list[tuple[str, str, bool]]) -> None:
        rec = self._base("user")
        rec["message"] = {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tid, "content": out, "is_error": err} for tid, out, err in pairs]}
        self.lines.append(json.dumps(rec))

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(self.lines) + "\n")


def long_session() -> Writer:
    w = Writer("6d1f0c2e-1b7a-4c55-9a0e-5b8f3e2d4a10", T0)
    w.user("The checkout handler returns 500 when the cart is empty. Can you find out why and fix it?")
    ids = w.assistant("Let me look at the checkout handler.", [("Read", {"file_path": f"{PROJECT}/internal/checkout/handler.go"})])
    w.results([(ids[0], SOURCE, False)])
    ids = w.assistant(None, [("Bash", {"command": "go test ./internal/checkout/..."})])
    w.results([(ids[0], "--- FAIL: TestEmptyCart (0.00s)\n    handler_test.go:41: status 500, want 400\nFAIL", True)])
    w.user("Please always run the tests with -race in this repo; we had data races slip through before.")
    ids = w.assistant("Understood — I'll use -race from now on.", [("Bash", {"command": "go test -race ./internal/checkout/..."})])
    w.results([(ids[0], "--- FAIL: TestEmptyCart (0.01s)\nFAIL", True)])
    ids = w.assistant("The handler dereferences cart.Items[0] without a length check.",
                      [("Edit", {"file_path": f"{PROJECT}/internal/checkout/handler.go", "old_string": "item := cart.Items[0]",
                                 "new_string": "if len(cart.Items) == 0 {\n\thttp.Error(w, \"empty cart\", 400)\n\treturn\n}\nitem := cart.Items[0]"})])  # fmt: skip
    w.results([(ids[0], "The file has been updated.", False)])
    w.user("No, don't return 400 there. We decided that an empty cart is a 422 with a JSON error body — that's the API contract with the mobile app.")
    ids = w.assistant("Switching to 422 with a JSON body.", [("Edit", {"file_path": f"{PROJECT}/internal/checkout/handler.go",
                      "old_string": "http.Error(w, \"empty cart\", 400)", "new_string": "writeJSONError(w, 422, \"empty_cart\")"})])  # fmt: skip
    w.results([(ids[0], "The file has been updated.", False)])
    ids = w.assistant(None, [("Bash", {"command": "go test -race ./..."})])
    w.results([(ids[0], "ok  \twebshop/internal/checkout\t0.412s\nok  \twebshop/internal/cart\t0.210s", False)])
    w.user("I'm mostly a backend person, so when you touch the React admin, explain the frontend bits in a bit more detail.")
    w.assistant("Will do. The fix is in and all tests pass with -race.")
    w.user("Next: the admin order list is slow. Let's look at the query.")
    ids = w.assistant("Reading the repository layer.", [("Read", {"file_path": f"{PROJECT}/internal/orders/repo.go"}),
                                                       ("Grep", {"pattern": "SELECT .* FROM orders", "path": PROJECT})])  # fmt: skip
    w.results([(ids[0], SOURCE.replace("handler", "repo"), False), (ids[1], "internal/orders/repo.go:88: SELECT * FROM orders ORDER BY created_at", False)])
    ids = w.assistant("The list query has no LIMIT and no index on created_at.", [("Bash", {"command": "psql webshop -c '\\d orders'"})])
    w.results([(ids[0], "Table \"public.orders\"\n id | bigint\n created_at | timestamptz\nIndexes:\n \"orders_pkey\" PRIMARY KEY", False)])
    w.user("Remember that we deploy only on Fridays, and migrations must go out a day before the code that needs them.")
    ids = w.assistant("Noted. I'll write the migration separately.", [("Write", {"file_path": f"{PROJECT}/migrations/0042_orders_created_at.sql",
                      "content": "CREATE INDEX CONCURRENTLY orders_created_at_idx ON orders (created_at DESC);"})])  # fmt: skip
    w.results([(ids[0], "File created successfully.", False)])
    ids = w.assistant(None, [("Bash", {"command": "make migrate-check"})])
    w.results([(ids[0], "migrations ok (42)", False)])
    w.user("Our staging board is at https://linear.app/webshop/team/OPS — file the follow-up there.")
    w.assistant("I'll reference OPS for the follow-up. Summary: empty-cart returns 422 JSON; orders index migration 0042 is ready for Thursday.")
    return w


def chitchat_session() -> Writer:
    w = Writer("0b9e7c44-2a61-4f0e-8d3c-7c1d2e3f4a5b", T0 + timedelta(days=1))
    w.user("thanks, that worked!")
    w.assistant("Glad to hear it.")
    w.user("ok bye")
    w.assistant("Bye!")
    return w


def paused_session() -> Writer:
    w = Writer("9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d", T0 + timedelta(days=2))
    w.user("Never commit directly to main; always open a PR, even for one-line fixes.")
    w.assistant("Understood.")
    w.command("/pause-memory")
    w.user("My personal password manager is 1Password and I always use the staging account alice@example.com — don't remember this.")
    w.assistant("Okay, memory is paused for this session.")
    return w


def mewcode_session(path: Path) -> None:
    t = T0 + timedelta(days=3)
    recs = [
        {"type": "system_prompt", "content": "You are MewCode."},
        {"type": "user", "content": "Prefer table-driven tests in Go; I find them easier to review."},
        {"type": "assistant", "content": [{"type": "text", "text": "Sure."}, {"type": "tool_use", "id": "call_1", "name": "bash", "input": {"command": "go test ./..."}}]},
        {"type": "tool_result", "tool_use_id": "call_1", "content": "ok"},
        {"type": "assistant", "content": "All green."},
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        for i, r in enumerate(recs):
            r["timestamp"] = (t + timedelta(seconds=10 * i)).isoformat().replace("+00:00", "Z")
            fh.write(json.dumps(r) + "\n")
    path.with_suffix(".meta").write_text(json.dumps({"title": "table tests", "message_count": len(recs)}))


# Two notes the agent wrote on different days, saying one thing: the offline dream merges near
# duplicates (jobs/dream/duplicates.py: same type, similarity >= 0.85), so `memd demo` shows a
# merge and its undo. Written by memd (`source: memd`, `updated`): the dream never merges a file
# edited by hand. Git and wheels keep no file times, so `memd demo` sets each copy's time to its
# `updated` (a later time would read as a hand edit).
DRAWER_NOTES = {
    "pr-for-every-change": ("2026-11-19T10:00:00Z", "Never commit directly to main, open a PR instead"),
    "never-commit-to-main": ("2026-11-22T10:00:00Z", "Never commit directly to main; always open a PR"),
}
NOTE_BODY = ("Never commit directly to main; always open a pull request, even for one-line fixes.\n\n"
             "**Why:** the user asked for it: every change is reviewed.\n"
             "**How to apply:** branch, push, open a PR; never push to main.\n")


def drawer_notes(memory: Path) -> None:
    memory.mkdir(parents=True, exist_ok=True)
    for name, (when, description) in DRAWER_NOTES.items():
        path = memory / f"{name}.md"
        path.write_text(f"---\nname: {name}\ndescription: {description}\nmetadata:\n  type: feedback\n  source: memd\n"
                        f"  provider: offline\n  updated: '{when}'\n---\n\n{NOTE_BODY}")
        t = datetime.fromisoformat(when.replace("Z", "+00:00")).timestamp()
        os.utime(path, (t, t))


SETTINGS = """{
  // memd reads the "memory" object; everything is optional.
  "memory": {
    "enabled": true,
    "extractEveryTurns": 1,
    "sessionMemory": { "enabled": true, "minInitTokens": 10000, "minUpdateTokens": 5000, "toolCallsBetween": 3 },
    "dream": { "enabled": true, "minHours": 24, "minSessions": 5 },
    "global": { "enabled": true, "maxBytes": 8192 },
  },
  // memd's own settings: the demo runs with the deterministic offline provider.
  "memd": { "provider": "offline" },
}
"""


def main() -> None:
    if HOME.exists():
        shutil.rmtree(HOME)
    proj = HOME / "projects" / KEY
    long_session().write(proj / "6d1f0c2e-1b7a-4c55-9a0e-5b8f3e2d4a10.jsonl")
    chitchat_session().write(proj / "0b9e7c44-2a61-4f0e-8d3c-7c1d2e3f4a5b.jsonl")
    paused_session().write(proj / "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d.jsonl")
    mewcode_session(HOME / "projects" / "-home-dev-tools" / ".mewcode" / "sessions" / "mew-7f3a.jsonl")
    (HOME / "settings.json").write_text(SETTINGS)
    drawer_notes(HOME / "memory")


if __name__ == "__main__":
    if sys.argv[1:] == ["--notes"]:  # only the drawer's notes: the transcripts' ids come from hash() and vary by run
        drawer_notes(HOME / "memory")
    else:
        main()
