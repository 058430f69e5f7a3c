"""Issue 27 point 3: recall's keyword ranking, the daemon's side of `memd recall --hook`, as it was and as it is.

    .venv/bin/python bench/bench_recall_rank.py [--memories 2000 20000] [--rounds 2]

On bench_hooks.py's home (the memories over 20 git projects and the drawer, indexed) and bench_hook_floor.py's
prompts in its order (five a project, a quarter each naming a topic, asking to fix something, in Chinese, naming
nothing memory holds), one process times, prompt by prompt and alternated: the ranking as it was before this
work (the reference of tests/agent/test_recall_rows.py: a word's exact count in scope by a join on `memories`,
then `query_index`), this tree's `offline_pick` on a plain read-only connection (what a hook answering itself
runs), and the same with the daemon's kept connection and scope (`memd.agent.hooks.Kept`, new each round: each
project's first prompt fills its table, as a daemon's does when no SessionStart came first), and "warmed": a
`Kept` new each round too, its `warm` run before each project's five prompts as the daemon's `prepare` runs it
after a SessionStart's answer (timed apart: "warm"; the phrases with many matches that earlier prompts named, in
any project, scored in this one's scope). All must pick the same memories; the figures are milliseconds of one
call, the first round left out.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_hooks import build_home, prompts
from bench.common import pct
from memd.agent import candidates as cands
from memd.agent.hooks import Kept
from memd.index.search import open_readonly
from memd.keys import project_key
from memd.logs.events import cli_defaults
from tests.agent.test_recall_rows import reference_pick


def measure(home_dir: Path, n: int, rounds: int) -> dict[str, dict[str, float]]:
    home, projects = build_home(home_dir, 100, n)
    plain = open_readonly(home.search_db)
    times: dict[str, list[float]] = {"before": [], "plain": [], "kept": [], "warmed": [], "warm": []}
    try:
        for rnd in range(rounds):
            kept, warmed = Kept(home), Kept(home)
            for i, prompt in enumerate(prompts(100)):
                key = project_key(projects[(i // 5) % 20])
                if i % 5 == 0:  # the session's SessionStart: the daemon's `prepare` (`Kept.warm`) after its answer
                    w0 = time.perf_counter()
                    warmed.warm(key)
                    warmed.done()
                    if rnd:
                        times["warm"].append((time.perf_counter() - w0) * 1000)
                t0 = time.perf_counter()
                want = reference_pick(plain, prompt, key, [], cands.MAX_PICKS)
                t1 = time.perf_counter()
                got = cands.offline_pick(plain, prompt, key, [], cands.MAX_PICKS)
                t2 = time.perf_counter()
                scope = kept.scope(key)
                kept_got = cands.offline_pick(kept.search(), prompt, key, [], cands.MAX_PICKS, scope=scope)
                kept.done()
                t3 = time.perf_counter()
                conn, scope = warmed.scoped(key)
                warmed_got = cands.offline_pick(conn, prompt, key, [], cands.MAX_PICKS, scope=scope)
                warmed.done()
                t4 = time.perf_counter()
                if not want == got == kept_got == warmed_got:
                    sys.exit(f"the rankings differ for {prompt!r} in {key}")
                if rnd:
                    for name, took in (("before", t1 - t0), ("plain", t2 - t1), ("kept", t3 - t2), ("warmed", t4 - t3)):
                        times[name].append(took * 1000)
            kept.close()
            warmed.close()
    finally:
        plain.close()
    return {k: {"p50": pct(v, 0.5), "p95": pct(v, 0.95), "max": max(v)} for k, v in times.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--memories", type=int, nargs="+", default=[2_000, 20_000])
    ap.add_argument("--rounds", type=int, default=2, help="passes over the 100 prompts; the first is left out")
    args = ap.parse_args()
    cli_defaults()
    work = Path(tempfile.mkdtemp(prefix="memd-bench-rank-"))
    out = {}
    try:
        for n in args.memories:
            out[n] = measure(work / f"m{n}", n, max(2, args.rounds))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
