"""Issue 4 benchmark: what the extraction gate saves, in model tokens per 100 human turns.

Every main transcript of the corpus is replayed line by line into a fresh home,
as an agent writes it. After each line the real ledger ingests it and
`jobs.extract.due` decides; a due session (a new human turn, `extractEveryTurns`
1) runs the real job through `memd.job.runner.run_job` — deterministic pre-gate,
gate on the small model, extraction on the strong one only on yes — with the
real `anthropic` client against an in-process FakeAnthropic, whose usage is what
the API would report (input: a quarter of the JSON of system and messages,
`estimate_input_tokens`; output: a quarter of the scripted reply's length).

The ungated baseline, in the same run, extracts every turn: for every due span,
before the gated job runs, the extraction request the job would send (built with
the job's own pieces: `read_span`, `unpaused`, `memwrite.prompt_context`,
`render`, `EXTRACT_SYSTEM`) goes through a second `memd.llm.client.LLM` to a second
fake with the same extraction responder. No pre-gate and no gate on that side.
It sees the memory directories as the gated run left them, which are smaller
than an ungated run's would be, so the baseline is if anything underestimated
(and the ratio conservative).

The fake's gate is scripted, deterministically: it says yes when the span's
human text carries an explicit durable marker (`memd.offline.has_durable`:
remember/always/never/prefer/we decided …), but never so often that the running
yes-rate would pass 20 % of gate calls. Extraction answers with the operations
the offline provider finds in the span's human text (realistic, not fixed, sizes).

    .venv/bin/python bench/bench_extract.py [--no-write]
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memd.llm.client import LLM
from memd.llm.types import LLMConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import structlog

import jobs.extract as extract
from bench.common import CORPUS, REPO, need_corpus, write_section
from jobs.extract.gate import GATE_ASSISTANT_CHARS, GATE_BUDGET_CHARS, GATE_SYSTEM, human_texts, pre_gate
from jobs.extract.offline import find_durable, has_durable
from jobs.extract.prompt import EXTRACT_SYSTEM, RELATED_BODIES, SPAN_BUDGET_CHARS, prompt_context
from memd import state
from memd.clock import iso
from memd.discovery import session_file
from memd.job.context import JobContext, get_cursor
from memd.job.runner import run_job
from memd.ledger import store as ledger
from memd.ledger.pause import unpaused
from memd.settings import defaults
from memd.transcripts.spans import Piece, read_span, render
from memd.tree import (
    Home,
    Place,
)
from tests.fakeapi import FakeAnthropic, Reply, estimate_input_tokens, ops_text, request_system_text, text

SECTION_TITLE = "## Gate and extraction (issue 4)"
COMMAND = ".venv/bin/python bench/bench_extract.py"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
MAX_YES_RATE = 0.20
TARGET_RATIO = 0.25
TARGET_MEDIAN_GATE_INPUT = 2000
INTERRUPTION = "[Request interrupted by user"


# -- the scripted model ------------------------------------------------------------------


@dataclass
class Script:
    """The fake's answers. The replay sets `human` to the due span's human text before each run."""

    human: list[tuple[str, str | None]] = field(default_factory=list)
    gate_calls: int = 0
    gate_yes: int = 0
    marked: int = 0  # gate calls whose span carried a durable marker (yes before the cap)

    def __call__(self, body: dict[str, Any]) -> Reply | None:
        system = request_system_text(body)
        if system.startswith(GATE_SYSTEM[:60]):
            return text(self.gate())
        if system.startswith(EXTRACT_SYSTEM[:60]):
            return text(self.operations())
        return None

    def gate(self) -> str:
        """Yes for every fifth gate call, so the rate sits at the 20 % cap (the most extraction the
        target allows), and on an explicit durable marker as long as the running rate stays ≤ 20 %."""
        self.gate_calls += 1
        marked = has_durable(self.human)
        self.marked += marked
        room = self.gate_yes + 1 <= MAX_YES_RATE * self.gate_calls
        if not room or not (marked or self.gate_calls % 5 == 0):
            return "no"
        self.gate_yes += 1
        return "yes"

    def operations(self) -> str:
        """What the offline provider finds in the span: an empty list when nothing is durable."""
        ops = [{"op": "add", "scope": f.scope, "name": f.name, "description": f.description, "type": f.type,
                "body": f.body, "reason": f"the user said so ({f.kind})"} for f in find_durable(self.human)]  # fmt: skip
        return ops_text(*ops)


# -- the model layers ----------------------------------------------------------------------


def make_llm(url: str, sink: list[dict[str, Any]]) -> Any:
    """A real `memd.llm.client.LLM` at the fake; every answered call's usage lands in `sink`."""

    config = LLMConfig(provider="anthropic", base_url=url, api_key="bench", timeout_s=30.0, max_retries=0,
                       daily_token_budget=0)  # fmt: skip
    return LLM(config, usage_sink=sink.append, tokens_used_today=None)


def input_of(rec: dict[str, Any]) -> int:
    """Every input token the model read, whether billed fresh or from the prompt cache."""
    return int(rec["input_tokens"]) + int(rec["cache_read_tokens"]) + int(rec["cache_write_tokens"])


# -- the replay ----------------------------------------------------------------------------


@dataclass
class Span:
    """One due run: what the job saw and what it did."""

    session: str
    human: int
    outcome: str
    gate: str  # "skipped" (pre-gate), "yes", "no"
    interruption_only: bool
    baseline_in: int
    baseline_out: int
    gated_in: int = 0
    gated_out: int = 0
    gate_in: int = 0  # the gate call's input (0 when the pre-gate skipped it)
    gate_in_no_tools: int = 0  # what it would be if the gate saw no tool calls or results (estimated)
    gate_in_user_only: int = 0  # … if it saw only what the user typed (estimated)


@dataclass
class Tally:
    spans: list[Span] = field(default_factory=list)
    gated: list[dict[str, Any]] = field(default_factory=list)  # usage records of the gated job
    baseline: list[dict[str, Any]] = field(default_factory=list)  # usage records of the ungated baseline
    human_turns: int = 0
    lines: int = 0
    sessions: int = 0
    catch_up: dict[str, int] = field(default_factory=dict)


def main_transcripts() -> list[Path]:
    """Every transcript of the corpus except sub-agent folders (which are copied whole, not replayed)."""
    return sorted(p for p in CORPUS.rglob("*.jsonl") if "subagents" not in p.parts)


def lay_out_subagents(home: Path) -> None:
    for sub in sorted(CORPUS.rglob("subagents")):
        rel = sub.relative_to(CORPUS)
        shutil.copytree(sub, home / "projects" / f"-corpus-{rel.parts[0]}" / Path(*rel.parts[1:]))


def plan_pieces(ctx: JobContext, target: Place) -> list[Piece]:
    """The span the job is about to read, reduced as the job reduces it (pause toggles honoured)."""
    row = ctx.conn.execute("SELECT path, format, safe_offset FROM sessions WHERE key=? AND session_id=?",
                           (target.key, target.session_id)).fetchone()  # fmt: skip
    cur = get_cursor(ctx.conn, extract.NAME, str(target)) or {}
    span = read_span(row["path"], int(cur.get("offset", 0)), row["safe_offset"], row["format"])
    return unpaused(span.pieces, bool(cur.get("paused", False)))[0]


def baseline_call(ctx: JobContext, llm: Any, target: Place, pieces: list[Piece]) -> None:
    """The extraction request the job would make for this span, made without any gate."""
    texts = human_texts(pieces)
    context, _shown = prompt_context(ctx, target.key or "", texts, RELATED_BODIES)
    user = f"{context}\n\n## New conversation\n\n{render(pieces, SPAN_BUDGET_CHARS)}"
    llm.complete(job="extract", tier="strong", system=EXTRACT_SYSTEM, user=user)


def replay_session(ctx: JobContext, src: Path, home: Home, script: Script, base_llm: Any, tally: Tally) -> None:
    """Append `src` line by line; after each line ingest, and run the job whenever it is due."""
    key, sid = f"-corpus-{src.relative_to(CORPUS).parts[0]}", src.stem
    dst = home.projects / key / src.name
    dst.parent.mkdir(parents=True, exist_ok=True)
    target = Place("session", key, sid)
    with open(dst, "ab") as out:
        for line in src.read_bytes().splitlines(keepends=True):
            out.write(line)
            out.flush()
            tally.lines += 1
            sf = session_file(home, key, sid)
            assert sf is not None
            ledger.ingest(ctx.conn, sf, iso(NOW))
            if not extract.due(ctx, only=target):
                continue
            tally.spans.append(run_span(ctx, target, script, base_llm, tally))


def run_span(ctx: JobContext, target: Place, script: Script, base_llm: Any, tally: Tally) -> Span:
    pieces = plan_pieces(ctx, target)
    human = human_texts(pieces)
    script.human = human
    seen_base, seen_gated = len(tally.baseline), len(tally.gated)
    baseline_call(ctx, base_llm, target, pieces)
    result = run_job(ctx, extract, target)
    if result.outcome != "ok":
        raise SystemExit(f"{target}: {result.outcome} {result.reason}")
    base, gated = tally.baseline[seen_base:], tally.gated[seen_gated:]
    gate = [r for r in gated if r["job"] == "gate"]
    return Span(
        str(target), len(human), result.outcome, str(result.details.get("gate", "")),
        bool(human) and all(t.strip().startswith(INTERRUPTION) for t, _ in human),
        sum(input_of(r) for r in base), sum(int(r["output_tokens"]) for r in base),
        sum(input_of(r) for r in gated), sum(int(r["output_tokens"]) for r in gated),
        sum(input_of(r) for r in gate), gate_tokens(pieces, ("human", "assistant", "command")) if gate else 0,
        gate_tokens(pieces, ("human", "command")) if gate else 0,
    )  # fmt: skip


def gate_tokens(pieces: list[Piece], kinds: tuple[str, ...]) -> int:
    """Counterfactual, not measured through the job: the gate's input had its prompt kept only
    pieces of these kinds (its yes/no criteria are about what the user says), by the fake's estimate."""
    kept = [p for p in pieces if p.kind in kinds]
    body = {"system": [{"type": "text", "text": GATE_SYSTEM, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": render(kept, GATE_BUDGET_CHARS)}]}  # fmt: skip
    return estimate_input_tokens(body)


def catch_up_visibility(rows: list[dict[str, Any]]) -> dict[str, int]:
    """When memd first meets a home (or catches up after downtime) a whole session is one span, and the
    prompts keep only its last characters: how many of the span's human messages do they still show?"""
    out = {"human": 0, "in_gate_prompt": 0, "in_extract_prompt": 0, "gate_prompts_without_human": 0}
    for r in rows:
        pieces = unpaused(read_span(r["path"], 0, r["safe_offset"], r["format"]).pieces, False)[0]
        said = [p.text[:60] for p in pieces if p.kind == "human"]
        if not said or not pre_gate(pieces)[0]:
            continue
        gate, ext = render(pieces, GATE_BUDGET_CHARS), render(pieces, SPAN_BUDGET_CHARS)
        out["human"] += len(said)
        out["in_gate_prompt"] += sum(t in gate for t in said)
        out["in_extract_prompt"] += sum(t in ext for t in said)
        out["gate_prompts_without_human"] += not any(t in gate for t in said)
    return out


def replay(work: Path) -> tuple[Tally, Script, float]:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    home = Home(work)
    lay_out_subagents(work)
    tally, script = Tally(), Script()
    started = time.perf_counter()
    with FakeAnthropic(responder=script) as gated_api, FakeAnthropic(responder=script) as base_api:
        ctx = JobContext(home=home, settings=defaults(), conn=state.connect(home.state_db), now=lambda: NOW,
                         log=structlog.get_logger(), llm_factory=lambda c: make_llm(gated_api.url, tally.gated))  # fmt: skip
        base_llm = make_llm(base_api.url, tally.baseline)
        for src in main_transcripts():
            replay_session(ctx, src, home, script, base_llm, tally)
        rows = ledger.session_rows(ctx.conn)
        tally.human_turns = sum(int(r["safe_human_turns"]) for r in rows)
        tally.sessions = len(rows)
        tally.catch_up = catch_up_visibility(rows)
    return tally, script, time.perf_counter() - started


# -- figures -------------------------------------------------------------------------------


def figures(t: Tally, s: Script, seconds: float) -> dict[str, Any]:
    gate = [r for r in t.gated if r["job"] == "gate"]
    ext = [r for r in t.gated if r["job"] == "extract"]
    per = 100 / t.human_turns
    g_in = sum(input_of(r) for r in t.gated)
    g_out = sum(int(r["output_tokens"]) for r in t.gated)
    b_in = sum(input_of(r) for r in t.baseline)
    b_out = sum(int(r["output_tokens"]) for r in t.baseline)
    passed = [sp for sp in t.spans if sp.gate != "skipped"]
    pg_in = sum(sp.baseline_in for sp in passed)
    pg_out = sum(sp.baseline_out for sp in passed)
    gate_inputs = [input_of(r) for r in gate]
    # counterfactuals (estimates, not runs): the pre-gate also skipping interruption-only spans; a gate
    # prompt without tool calls and results; both
    def cost(sp: Span, gate_in: int | None = None) -> int:
        return sp.gated_in + sp.gated_out - (0 if gate_in is None else sp.gate_in - gate_in)

    cf_interrupt = sum(cost(sp) for sp in passed if not sp.interruption_only)
    cf_tools = sum(cost(sp, sp.gate_in_no_tools) for sp in passed)
    cf_both = sum(cost(sp, sp.gate_in_no_tools) for sp in passed if not sp.interruption_only)
    cf_user = sum(cost(sp, sp.gate_in_user_only) for sp in passed if not sp.interruption_only)
    base_total = b_in + b_out
    return {
        "sessions": t.sessions, "lines_replayed": t.lines, "human_turns": t.human_turns, "spans": len(t.spans),
        "pre_gate_skipped": sum(1 for sp in t.spans if sp.gate == "skipped"),
        "gate_calls": len(gate), "gate_marked": s.marked, "gate_yes": s.gate_yes,
        "yes_rate": s.gate_yes / len(gate) if gate else 0.0,
        "gate_calls_on_interruption_only": sum(1 for sp in passed if sp.interruption_only),
        "extract_calls": len(ext),
        "gate_input": sum(input_of(r) for r in gate), "gate_output": sum(int(r["output_tokens"]) for r in gate),
        "extract_input": sum(input_of(r) for r in ext), "extract_output": sum(int(r["output_tokens"]) for r in ext),
        "gated_input_per100": g_in * per, "gated_output_per100": g_out * per,
        "baseline_calls": len(t.baseline),
        "baseline_input_per100": b_in * per, "baseline_output_per100": b_out * per,
        "ratio": (g_in + g_out) / base_total, "ratio_input": g_in / b_in,
        "ratio_vs_pregated_baseline": (g_in + g_out) / (pg_in + pg_out) if pg_in + pg_out else 0.0,
        "ratio_if_pregate_skipped_interruptions": cf_interrupt / base_total,
        "ratio_if_gate_saw_no_tool_io": cf_tools / base_total,
        "ratio_if_both": cf_both / base_total,
        "ratio_if_gate_saw_only_user_text": cf_user / base_total,
        "baseline_input_median": statistics.median(input_of(r) for r in t.baseline) if t.baseline else 0,
        "gate_input_median": statistics.median(gate_inputs) if gate_inputs else 0,
        "gate_input_max": max(gate_inputs, default=0),
        "cache_read_tokens": sum(int(r["cache_read_tokens"]) for r in t.gated),
        "seconds": seconds,
        "catch_up": t.catch_up,
    }  # fmt: skip


def verdict(ok: bool) -> str:
    return "meets" if ok else "MISSES"


def section(f: dict[str, Any]) -> str:
    ratio_ok = f["ratio"] <= TARGET_RATIO
    med_ok = f["gate_input_median"] <= TARGET_MEDIAN_GATE_INPUT
    c = f["catch_up"]
    gate_share = (f["gate_input"] + f["gate_output"]) / (f["gated_input_per100"] + f["gated_output_per100"]) * 100 \
        / f["human_turns"]  # fmt: skip
    return f"""{SECTION_TITLE}

Command: `{COMMAND}`

Every transcript of the corpus ({f['sessions']} main sessions, {f['lines_replayed']:,} lines, {f['human_turns']} human
turns by the ledger's count) replayed line by line into a fresh home with the default settings (`extractEveryTurns`
1): after each line the ledger ingests it and `jobs.extract.due` decides, and a due span runs the real job through
`run_job` and the real `anthropic` client against an in-process FakeAnthropic. Tokens are the fake's usage, i.e. what
the API would report: input a quarter of the JSON of system and messages (`estimate_input_tokens`), output a quarter
of the scripted reply. The gate is scripted deterministically: yes for every fifth gate call (the 20 % cap, the most
extraction the target allows) and on an explicit durable marker (`memd.offline.has_durable`) while the running rate
stays ≤ 20 % — no corpus turn carries one; extraction answers with the operations the offline provider finds in the
span. The **ungated baseline** runs in the same replay: for every due span, before the job, the extraction request
the job would build for it (its own `read_span`/`unpaused`, `memwrite.prompt_context`, `render`, `EXTRACT_SYSTEM`) is
sent through a second `memd.llm.client.LLM` to a second fake with the same responder — no pre-gate, no gate. It sees the
memory directories the gated run left (smaller than an ungated run's), so it is if anything underestimated.

| figure | value |
|---|---:|
| due spans (one per new human turn) | {f['spans']} |
| skipped by the deterministic pre-gate (no model call) | {f['pre_gate_skipped']} |
| gate calls | {f['gate_calls']} |
| … whose only human text was Claude Code's "[Request interrupted by user…]" | {f['gate_calls_on_interruption_only']} |
| gate yes | {f['gate_yes']} ({f['yes_rate']:.1%} of gate calls; cap 20 %) |
| extraction calls | {f['extract_calls']} |
| gate input / output tokens (total) | {f['gate_input']:,} / {f['gate_output']:,} |
| extraction input / output tokens (total) | {f['extract_input']:,} / {f['extract_output']:,} |
| **gated: input / output tokens per 100 human turns** | **{f['gated_input_per100']:,.0f} / {f['gated_output_per100']:,.0f}** |
| **ungated baseline: input / output tokens per 100 human turns** ({f['baseline_calls']} extraction calls) | **{f['baseline_input_per100']:,.0f} / {f['baseline_output_per100']:,.0f}** |
| gated ÷ ungated, input + output | **{f['ratio']:.1%}** (target ≤ {TARGET_RATIO:.0%}: {verdict(ratio_ok)}) |
| gated ÷ ungated, input only | {f['ratio_input']:.1%} |
| gated ÷ a baseline that keeps the pre-gate | {f['ratio_vs_pregated_baseline']:.1%} |
| median gate input tokens | **{f['gate_input_median']:,.0f}** (target ≤ {TARGET_MEDIAN_GATE_INPUT:,}: {verdict(med_ok)}); max {f['gate_input_max']:,} |
| median ungated extraction input tokens | {f['baseline_input_median']:,.0f} |
| wall time of the replay | {f['seconds']:.1f} s |

Where the tokens go: the gate is {gate_share:.0%} of the gated tokens. Turn by turn the spans are short (the median
extraction prompt is {f['baseline_input_median']:,.0f} tokens, mostly its system prompt), so the gate must read much
less than an extraction to pay off. It does: it reads what the user said and the agent's words clipped to
{GATE_ASSISTANT_CHARS} characters, never tool calls or results (§3.1 counts concrete code and command content
as no), and the pre-gate makes no call for spans whose only user text is Claude Code's "[Request interrupted by user…]"
marker. Counterfactual estimates from the same spans with the same estimator (not measured through the job):

| counterfactual | gated ÷ ungated |
|---|---:|
| the pre-gate also skips spans whose only user text is "[Request interrupted by user…]" | {f['ratio_if_pregate_skipped_interruptions']:.1%} |
| the gate prompt leaves out tool calls and results | {f['ratio_if_gate_saw_no_tool_io']:.1%} |
| both | {f['ratio_if_both']:.1%} |
| both, and the gate sees only what the user typed (no assistant text either) | {f['ratio_if_gate_saw_only_user_text']:.1%} |

Catch-up spans: when memd first meets a home with these transcripts (or catches up after downtime) each session is one
span, and `render` drops tool output before what people said when a span is over budget. Of the {c['human']} human messages of those spans,
the gate prompt ({GATE_BUDGET_CHARS:,} characters) still shows {c['in_gate_prompt']} and the extraction prompt
({SPAN_BUDGET_CHARS:,}) {c['in_extract_prompt']}; {c['gate_prompts_without_human']} gate prompts show no human
message at all (tool output fills the budget).

The corpus is small in human turns ({f['human_turns']}): its sessions are long agentic runs with few user messages,
so "per 100 human turns" scales {f['human_turns']} turns up and a single span moves the ratio by a few points.
Prompts stay below the 1,024-token cache minimum, so nothing was read from the prompt cache
({f['cache_read_tokens']} tokens).
"""


def reflow(markdown: str, width: int = 118) -> str:
    """Re-wrap prose paragraphs after the figures are filled in; tables and headings stay as they are."""
    blocks = []
    for block in markdown.strip("\n").split("\n\n"):
        if block.startswith(("|", "#")):
            blocks.append(block)
        else:
            blocks.append(textwrap.fill(" ".join(block.split()), width, break_on_hyphens=False))
    return "\n\n".join(blocks) + "\n"


def write_results(text_: str, path: Path) -> None:
    write_section(SECTION_TITLE, text_, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-write", action="store_true", help="print, do not update bench/RESULTS.md")
    args = ap.parse_args()
    need_corpus()
    with tempfile.TemporaryDirectory() as tmp:
        tally, script, seconds = replay(Path(tmp))
    f = figures(tally, script, seconds)
    print(json.dumps(f, indent=2))
    if not args.no_write:
        write_results(reflow(section(f)), REPO / "bench" / "RESULTS.md")
    misses = [m for m, bad in (("ratio", f["ratio"] > TARGET_RATIO),
                               ("median gate input", f["gate_input_median"] > TARGET_MEDIAN_GATE_INPUT),
                               ("yes-rate", f["yes_rate"] > MAX_YES_RATE)) if bad]  # fmt: skip
    if misses:
        sys.exit(f"targets missed: {', '.join(misses)}")


if __name__ == "__main__":
    main()
