"""The `claude-code` provider per call: wall time, request size and tokens (issue 21, point 1).

    .venv/bin/python bench/bench_claudecode.py [--runs 7] [--write]

The real Claude Code binary (tests/realclaude.py) against the loopback fake Messages API
(tests/fakeapi.py, which estimates tokens as the API would: a quarter of the request's JSON).
Three ways of making memd's gate call and its extraction call, alternated run by run so the
noisy machine treats them alike:

- `anthropic`: memd's own client (the reference: what an API key costs per call);
- `claude-code`: the provider, isolated (memd.llm.claudecode);
- `claude -p` bare: the same prompt through `claude -p --output-format json --model haiku` with
  no isolation, in a home holding a 2 KB `CLAUDE.md` and a SessionStart hook printing 2 KB (what
  a user's home and memd's own hook give), to show what the isolation removes.

One warm-up call of each provider first, not counted (the `anthropic` SDK's import, Claude Code's
first start). Reported: the median wall time of a call, the request body's bytes as the API received it, the
input and output tokens the fake counted, and each as a ratio to the `anthropic` reference.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.extract.gate import GATE_SYSTEM
from jobs.extract.prompt import EXTRACT_SYSTEM
from memd.llm.client import LLM
from memd.llm.types import LLMConfig
from tests.fakeapi import FakeAnthropic, estimate_input_tokens, text
from tests.realclaude import claude_env, ensure_claude

CONVERSATION = ("user: in this repo we always run `make lint` before committing; CI takes an hour otherwise\n"
                "assistant: Understood, I will run make lint first.\n") * 4  # fmt: skip
CALLS = {"gate": ("small", GATE_SYSTEM, CONVERSATION), "extract": ("strong", EXTRACT_SYSTEM, CONVERSATION)}


def _home(root: Path) -> tuple[Path, Path]:
    home = root / "home"
    config = home / ".claude"
    config.mkdir(parents=True)
    (config / "CLAUDE.md").write_text("# House rules\n" + "- prefer small functions with docstrings\n" * 50)
    hook = "printf '%.0s memory line' $(seq 1 180)"
    (config / "settings.json").write_text(json.dumps({"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": hook}]}]}}))
    return home, config


def _measure(api: FakeAnthropic, fn: Any) -> dict[str, float]:
    before = len(api.message_requests)
    t0 = time.monotonic()
    fn()
    wall = time.monotonic() - t0
    reqs = api.message_requests[before:]
    body = sum(len(json.dumps(r).encode()) for r in reqs)
    return {"wall": wall, "bytes": body, "in": sum(estimate_input_tokens(r) for r in reqs), "requests": len(reqs)}


def run(runs: int) -> dict[str, dict[str, list[dict[str, float]]]]:
    claude = ensure_claude()
    out: dict[str, dict[str, list[dict[str, float]]]] = {}
    with tempfile.TemporaryDirectory(prefix="memd-bench-cc-") as tmp, FakeAnthropic(default=text("yes")) as api:
        home, config = _home(Path(tmp))
        env = claude_env(config, api.base_url, home)
        os.environ.update(env)  # the provider runs Claude Code in memd's environment
        state = Path(tmp) / "memd"
        ways = {
            "anthropic": LLM(LLMConfig(provider="anthropic", base_url=api.base_url, api_key="test-key", max_retries=0)),
            "claude-code": LLM(LLMConfig(provider="claude-code", claude_path=str(claude.bin), state_dir=str(state),
                                         max_retries=0)),
        }
        neutral = Path(tmp) / "cwd"
        neutral.mkdir()
        for llm in ways.values():  # warm-up, not counted: the SDK's import, Claude Code's first start
            llm.complete(job="gate", tier="small", system=GATE_SYSTEM, user=CONVERSATION)
        for _ in range(runs):
            for call, (tier, system, user) in CALLS.items():
                for way, llm in ways.items():
                    m = _measure(api, lambda llm=llm, tier=tier, system=system, user=user, call=call:  # type: ignore[misc]
                                 llm.complete(job=call, tier=tier, system=system, user=user))
                    out.setdefault(call, {}).setdefault(way, []).append(m)
                bare = [str(claude.bin), "-p", "--output-format", "json", "--model", "haiku" if tier == "small" else "sonnet"]
                m = _measure(api, lambda bare=bare, system=system, user=user: subprocess.run(  # type: ignore[misc]
                    bare, input=f"{system}\n\n{user}", capture_output=True, text=True, env=env, cwd=neutral,
                    timeout=120, check=False))  # fmt: skip
                out.setdefault(call, {}).setdefault("claude -p bare", []).append(m)
    return out


def table(res: dict[str, dict[str, list[dict[str, float]]]], runs: int) -> str:
    lines = [f"| call | way | wall (median of {runs}) | ÷ anthropic | request bytes | ÷ anthropic | input tokens | requests |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for call, ways in res.items():
        ref = {k: statistics.median(m[k] for m in ways["anthropic"]) for k in ("wall", "bytes", "in")}
        for way, ms in ways.items():
            med = {k: statistics.median(m[k] for m in ms) for k in ("wall", "bytes", "in", "requests")}
            lines.append(f"| {call} | {way} | {med['wall'] * 1000:.0f} ms | {med['wall'] / ref['wall']:.1f} | "
                         f"{med['bytes']:,.0f} | {med['bytes'] / ref['bytes']:.2f} | {med['in']:,.0f} | {med['requests']:.0f} |")  # fmt: skip
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--write", action="store_true", help="print only; RESULTS.md is edited by hand")
    a = ap.parse_args()
    res = run(a.runs)
    print(table(res, a.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
