"""Issue 7 benchmark: what a dream over a 1,000-memory scope costs besides the model.

A project scope of 1,000 memories (four types, 50 near-duplicate pairs, 40 with
relative dates, bodies of 150-500 characters of Zipf-distributed words) and 30 sessions since the last
consolidation (half with a summary.md). The dream runs through
`memd.job.runner.run_job` with the real model layer (`memd.llm.client.LLM`, the real
`anthropic` client) against the fake Messages API, which answers at once with
a realistic plan: 50 merges, 40 rewrites, 20 deletes. The `anthropic` module
is imported before timing (the daemon pays that once per process, not per run).

The run's own overhead is the run's wall time minus the time spent inside
`LLM.complete` (prompt redaction, the SDK, the HTTP round trip to the fake);
the budget is 2 s. Model input tokens are the fake's count of the request
(a quarter of its JSON length, the way `tests/fakeapi.py` estimates it).
Beside it: `dream.due()` over 10,000 ledger sessions, and an offline-provider
run over the same scope.

    .venv/bin/python bench/bench_dream.py [--runs 5] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memd.history import runs as history
from memd.history import snapshots as swap
from memd.history import store
from memd.llm.client import LLM
from memd.llm.types import LLMConfig
from memd.memory.scan import scan_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import structlog

import jobs.dream as dream
from bench.common import REPO, write_section
from memd import state
from memd.clock import iso
from memd.discovery import discover_sessions
from memd.job.context import JobContext
from memd.job.runner import run_job
from memd.ledger import store as ledger
from memd.memory.file import render_memory
from memd.settings import parse_text
from memd.tree import (
    Home,
    Place,
)
from tests.fakeapi import FakeAnthropic, ops_text, text

SECTION_TITLE = "## Dream (issue 7)"
KEY = "-bench-dream"
TARGET = Place("project", KEY)
MEMORIES = 1000
PAIRS = 50
DATED = 40
DELETES = 20
SESSIONS = 30
OVERHEAD_BUDGET_S = 2.0
TYPES = ("user", "feedback", "project", "reference")
WORDS = ["build", "cache", "deploy", "staging", "review", "branch", "merge", "lint", "format", "schema", "migration", "index", "query", "latency", "budget", "token", "model", "prompt", "retry", "backoff", "queue", "worker", "lock", "journal", "snapshot", "rollback", "config", "secret", "vault", "rotate", "nightly", "release", "tag", "changelog", "owner", "oncall", "alert", "dashboard", "metric", "trace", "span", "logger", "parser", "adapter", "fixture", "harness", "benchmark", "corpus", "session", "summary", "drawer", "memory", "gate", "extract"]  # fmt: skip


def _lexicon() -> tuple[list[str], list[float]]:
    """WORDS plus 3,000 made-up words, Zipf-weighted: prose has a long tail, not 60 words."""
    r = random.Random(11)
    extra = ["".join(r.choice("abcdefghiklmnoprstuvwy") for _ in range(r.randint(3, 10))) for _ in range(3000)]
    words = WORDS + extra
    return words, [1.0 / (rank + 1) for rank in range(len(words))]


LEXICON, WEIGHTS = _lexicon()


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(LEXICON, WEIGHTS, k=n)).capitalize() + "."


def body_of(rng: random.Random) -> str:
    target = rng.randint(150, 500)
    out: list[str] = []
    while sum(len(x) + 1 for x in out) < target:
        out.append(sentence(rng, rng.randint(6, 14)))
    return " ".join(out)


def build_scope(home: Path, rng: random.Random) -> dict[str, list[str]]:
    """1,000 memd-written memories; returns the names the scripted plan works on."""
    d = home / "projects" / KEY / "memory"
    d.mkdir(parents=True)
    now = time.time()
    plan: dict[str, list[str]] = {"pairs": [], "dated": [], "deletes": []}
    names: list[str] = []
    i = 0
    while len(names) < MEMORIES:
        name = f"topic-{i:04d}"
        kind = TYPES[i % 4]
        desc = sentence(rng, rng.randint(5, 12))
        body = body_of(rng)
        pair = len(plan["pairs"]) < PAIRS and i % 19 == 3
        if not pair and len(plan["dated"]) < DATED and i % 23 == 5:
            body += " We agreed on this yesterday and review it next Monday."
            plan["dated"].append(name)
        t = now - rng.uniform(30, 600) * 3600
        _write(d, name, desc, kind, body, t)
        names.append(name)
        if pair and len(names) < MEMORIES:
            _write(d, name + "-dup", desc, kind, body.replace(".", "!", 1), t + 3600)
            names.append(name + "-dup")
            plan["pairs"].append(name)
        i += 1
    taken = set(plan["pairs"]) | set(plan["dated"])
    plan["deletes"] = [n for n in names if not n.endswith("-dup") and n not in taken][:DELETES]
    return plan


def _write(d: Path, name: str, desc: str, kind: str, body: str, t: float) -> None:
    p = d / f"{name}.md"
    p.write_text(render_memory(name, desc, kind, body, {"source": "memd", "updated": iso(datetime.fromtimestamp(t, UTC))}))
    os.utime(p, (t, t))


def build_sessions(home: Path, rng: random.Random) -> None:
    pdir = home / "projects" / KEY
    for s in range(SESSIONS):
        sid = f"sess-{s:03d}"
        ts = iso(datetime.now(UTC) - timedelta(hours=s + 1))
        recs = [{"type": "user", "uuid": f"{sid}-u", "sessionId": sid, "timestamp": ts,
                 "message": {"role": "user", "content": sentence(rng, 12)}},
                {"type": "assistant", "uuid": f"{sid}-a", "sessionId": sid, "timestamp": ts,
                 "message": {"id": f"m{sid}", "role": "assistant", "content": [{"type": "text", "text": "done"}]}}]  # fmt: skip
        (pdir / f"{sid}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        if s % 2 == 0:
            sm = pdir / sid / "session-memory"
            sm.mkdir(parents=True)
            (sm / "summary.md").write_text(f"# {sentence(rng, 5)}\n\n## Current state and next steps\n{body_of(rng)}\n")
    conn = state.connect(Home(home).state_db)
    for sf in discover_sessions(Home(home)):
        ledger.ingest(conn, sf, iso(datetime.now(UTC)))
    conn.close()


def scripted_plan(home: Path, plan: dict[str, list[str]]) -> str:
    d = home / "projects" / KEY / "memory"
    ops: list[dict[str, Any]] = []

    by = {m.name: m for m in scan_dir(d, "project", KEY).memories}
    for n in plan["pairs"]:
        m = by[n]
        ops.append({"op": "merge", "sources": [n, n + "-dup"], "name": n, "description": m.description,
                    "type": m.type, "body": m.body, "reason": "near-duplicates"})  # fmt: skip
    for n in plan["dated"]:
        m = by[n]
        ops.append({"op": "update", "name": n, "description": m.description, "type": m.type,
                    "body": m.body.replace("yesterday", "on 2026-11-29"), "reason": "absolute dates"})  # fmt: skip
    for n in plan["deletes"]:
        ops.append({"op": "delete", "name": n, "reason": "stale"})
    return ops_text(*ops)


class TimedLLM:
    """The real model layer, with the time spent inside each `complete` call recorded."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seconds = 0.0
        self.completions: list[Any] = []

    def __getattr__(self, name: str) -> Any:  # provider, available(): the real layer's
        return getattr(self.inner, name)

    def complete(self, **kw: Any) -> Any:
        t = time.perf_counter()
        try:
            done = self.inner.complete(**kw)
        finally:
            self.seconds += time.perf_counter() - t
        self.completions.append(done)
        return done


def make_ctx(home: Path, url: str | None, provider: str) -> tuple[JobContext, list[TimedLLM]]:
    made: list[TimedLLM] = []
    s = parse_text(json.dumps({"memd": {"provider": provider}}))

    def factory(ctx: JobContext) -> TimedLLM:
        cfg = LLMConfig(provider=provider, base_url=url, api_key="bench", timeout_s=60, max_retries=0,
                        daily_token_budget=0, max_output_tokens=16_000)  # fmt: skip
        llm = TimedLLM(LLM(cfg, usage_sink=lambda rec: None))
        made.append(llm)
        return llm

    h = Home(home)
    ctx = JobContext(h, s, state.connect(h.state_db), lambda: datetime.now(UTC), structlog.get_logger("bench"),
                     llm_factory=factory)  # fmt: skip
    return ctx, made


def quiet_logs() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


def one_model_run(base: Path, work: Path, reply: str, api: FakeAnthropic) -> dict[str, Any]:
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(base, work, symlinks=True)
    os.environ["ANTHROPIC_API_KEY"] = "bench"
    api.enqueue(text(reply))
    ctx, made = make_ctx(work, api.base_url, "anthropic")
    t = time.perf_counter()
    r = run_job(ctx, dream, TARGET, force=True)
    total = time.perf_counter() - t
    ctx.conn.close()
    assert r.outcome == "ok", r
    done = made[0].completions[0]
    changed = 2 * r.details["merged"] + r.details["rewritten"] + r.details["deleted"]
    return {"total_s": total, "model_s": made[0].seconds, "overhead_s": total - made[0].seconds,
            "input_tokens": done.input_tokens + done.cache_read_tokens + done.cache_write_tokens,
            "output_tokens": done.output_tokens, "changed": changed, "details": r.details}  # fmt: skip


def offline_run(base: Path, work: Path) -> dict[str, Any]:
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(base, work, symlinks=True)
    ctx, _ = make_ctx(work, None, "offline")
    t = time.perf_counter()
    r = run_job(ctx, dream, TARGET, force=True)
    took = time.perf_counter() - t
    ctx.conn.close()
    return {"total_s": took, "outcome": r.outcome, "reason": r.reason}


def parts(base: Path, work: Path) -> dict[str, float]:
    """Two fixed costs inside the overhead, timed alone: one YAML scan of the scope, one snapshot."""

    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(base, work, symlinks=True)
    d = work / "projects" / KEY / "memory"
    t = time.perf_counter()
    scan_dir(d, "project", KEY)
    scan = time.perf_counter() - t
    ref = history.Place("project", KEY)
    t = time.perf_counter()
    swap.snapshot(Home(work), ref, store.new_run_id(datetime.now(UTC)))
    return {"scan_s": scan, "snapshot_s": time.perf_counter() - t}


def due_over_10k(work: Path) -> float:
    """dream.due() on a ledger of 10,000 sessions over 100 projects, each with a memory directory."""
    h = Home(work)
    conn = state.connect(h.state_db)
    now = datetime.now(UTC)
    rows = [(f"-p{i % 100:03d}", f"s{i}", "/x", 3, iso(now - timedelta(minutes=7 * i))) for i in range(10_000)]
    conn.executemany("INSERT INTO sessions(key, session_id, path, human_turns, last_ts) VALUES (?,?,?,?,?)", rows)
    for k in range(100):
        d = work / "projects" / f"-p{k:03d}" / "memory"
        d.mkdir(parents=True)
        (d / "a.md").write_text(render_memory("a", "a", "user", "a"))
    s = parse_text("{}")
    ctx = JobContext(h, s, conn, lambda: now, structlog.get_logger("bench"))
    times = []
    for _ in range(5):
        t = time.perf_counter()
        dream.due(ctx)
        times.append(time.perf_counter() - t)
    conn.close()
    return statistics.median(times)


def measure(runs: int) -> dict[str, Any]:
    quiet_logs()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        (base / "projects").mkdir(parents=True)
        plan = build_scope(base, rng)
        build_sessions(base, rng)
        reply = scripted_plan(base, plan)
        with FakeAnthropic() as api:
            one_model_run(base, Path(tmp) / "warm", reply, api)  # warm the page cache and the HTTP pool path
            results = [one_model_run(base, Path(tmp) / f"run{i}", reply, api) for i in range(runs)]
        off = offline_run(base, Path(tmp) / "offline")
        fixed = parts(base, Path(tmp) / "parts")
        due_s = due_over_10k(Path(tmp) / "due")
    over = [r["overhead_s"] for r in results]
    first = results[0]
    return {
        "memories": first["details"]["memories"], "runs": runs,
        "overhead_median_s": statistics.median(over), "overhead_max_s": max(over),
        "total_median_s": statistics.median(r["total_s"] for r in results),
        "model_call_median_s": statistics.median(r["model_s"] for r in results),
        "input_tokens": first["input_tokens"], "output_tokens": first["output_tokens"],
        "changed": first["changed"], "details": first["details"],
        "offline_total_s": off["total_s"], "offline_reason": off["reason"], "due_10k_s": due_s,
        "scan_s": fixed["scan_s"], "snapshot_s": fixed["snapshot_s"], "load": os.getloadavg(),
    }  # fmt: skip


def section(r: dict[str, Any], command: str) -> str:
    per_mem = r["input_tokens"] / r["memories"]
    per_changed = r["input_tokens"] / max(1, r["changed"])
    d = r["details"]
    return f"""{SECTION_TITLE}

Command: `{command}`

A project scope of {r['memories']:,} memories (four types, {PAIRS} near-duplicate pairs, {DATED} with relative
dates, bodies of 150-500 characters of Zipf-distributed words) and {SESSIONS} sessions since the last
consolidation (half with a summary.md). Each run is a forced dream through `memd.job.runner.run_job`, the real model
layer and the real `anthropic` client against the fake Messages API, which answers at once with a plan of {PAIRS}
merges, {DATED} rewrites and {DELETES} deletes ({d['merged']} merged, {d['rewritten']} rewritten, {d['deleted']}
deleted applied). Overhead = the run's wall time minus the time inside `LLM.complete` (prompt redaction, SDK, HTTP
round trip); `anthropic` is imported before timing, as a daemon has it loaded. Median of {r['runs']} runs on fresh
copies of the scope, after one warm-up run. Load average at the end of the measurement: {r['load'][0]:.2f} /
{r['load'][1]:.2f} / {r['load'][2]:.2f} (1/5/15 min, 2 CPUs shared with other benchmarks and test suites).

Where the overhead goes: one scan of the scope's files (`memd.memory.file.scan_dir`: read, parse the YAML front
matter), rendering the rewritten files, the search-row sync, the staging directory (hard links), the swap. The
history snapshot is copied in a thread while the model answers: with a real model it is off the run's path; the
fake here answers in about a tenth of a second, so it mostly is not. MEMORY.md, the drawer render and the search
rows are refreshed from the memories the run already holds, not by a second scan.

| figure | value |
|---|---:|
| run overhead, median (budget {OVERHEAD_BUDGET_S:g} s) | {r['overhead_median_s']:.2f} s |
| run overhead, worst of {r['runs']} | {r['overhead_max_s']:.2f} s |
| whole run, median | {r['total_median_s']:.2f} s |
| inside `LLM.complete`, median | {r['model_call_median_s']:.2f} s |
| of the overhead: one YAML scan of the 1,000 files, timed alone | {r['scan_s']:.2f} s |
| of the overhead: the history snapshot (copy + fsync), timed alone | {r['snapshot_s']:.2f} s |
| model input tokens per run | {r['input_tokens']:,} |
| input tokens per memory in the scope | {per_mem:.0f} |
| input tokens per memory consolidated ({r['changed']} merged, rewritten or deleted) | {per_changed:.0f} |
| model output tokens (the scripted plan) | {r['output_tokens']:,} |
| offline provider, whole run on the same scope | {r['offline_total_s']:.2f} s ({r['offline_reason']}) |
| `dream.due()` over 10,000 sessions, 100 scopes | {r['due_10k_s'] * 1000:.1f} ms |
"""


def write_results(text_: str, path: Path) -> None:
    write_section(SECTION_TITLE, text_, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-write", action="store_true", help="print, do not update bench/RESULTS.md")
    args = ap.parse_args()
    r = measure(args.runs)
    print(json.dumps(r, indent=2))
    if not args.no_write:
        write_results(section(r, ".venv/bin/python bench/bench_dream.py"), REPO / "bench" / "RESULTS.md")
    if r["overhead_median_s"] > OVERHEAD_BUDGET_S:
        sys.exit(f"dream overhead {r['overhead_median_s']:.2f} s > {OVERHEAD_BUDGET_S:g} s")


if __name__ == "__main__":
    main()
