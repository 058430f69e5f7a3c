"""Issue 27 point 3: the daemon's part of a hook, this tree against another, alternated in one run.

    .venv/bin/python bench/bench_hook_daemon.py --base DIR [--memories 2000 20000] [--prompts 200]

A hook process spends the interpreter's start and its client (bench_hook_floor.py measures those, with the
machine's noise in every figure), then waits for the daemon: this measures that wait alone. Each tree (`--base`:
a checkout of the other, e.g. `git archive a06201f | tar -x -C DIR`) is installed editable into a venv of its
own and runs `memd run` on its own copy of one home (bench_hooks.py's: the memories over 20 git projects and the
drawer, indexed). One Python process asks both daemons over their hook sockets as the `memd` script does (each
tree's own `memd.agent.hookwire`, so its code stamp), prompt by prompt, the tree that goes first alternating:
SessionStart, then the prompt (five a project; bench_hook_floor.py's prompts), with 15 ms between two asks (about a
hook process's start). A figure is the milliseconds from the ask to the daemon's "records written", the hook's
whole wait.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_hook_floor import settle
from bench.bench_hooks import build_home, event, prompts
from bench.common import REPO, pct
from memd.logs.events import cli_defaults
from memd.tree import Home

KINDS = ("topic", "fix-it", "Chinese", "nothing")  # bench_hooks.prompts: i % 4


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "PYTHON"))}


def install(tree: Path, venv: Path) -> Path:
    """`tree` installed editable into a new venv; its `memd` script."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "-e", str(tree)], check=True, env=_env(),
                   stderr=subprocess.DEVNULL)  # fmt: skip
    return venv / "bin" / "memd"


def hookwire_of(tree: Path, name: str) -> ModuleType:
    """`tree`'s own `memd.agent.hookwire` (its code stamp is its tree's)."""
    spec = importlib.util.spec_from_file_location(f"hookwire_{name}", tree / "memd" / "agent" / "hookwire.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def measure(trees: dict[str, Path], scripts: dict[str, Path], work: Path, n: int, runs: int) -> dict[str, Any]:
    base_home, projects = build_home(work / f"m{n}", 100, n)
    homes: dict[str, Home] = {}
    procs = []
    wire = {name: hookwire_of(tree, name) for name, tree in trees.items()}
    try:
        for name, memd in scripts.items():
            homes[name] = Home(work / f"m{n}-{name}")
            shutil.copytree(base_home.root, homes[name].root, symlinks=True, ignore=shutil.ignore_patterns("*.sock"))
            procs.append(subprocess.Popen([str(memd), "--home", str(homes[name].root), "run"], env=_env(),
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip
            settle(homes[name], procs[-1])
        times: dict[str, list[float]] = {}
        load0 = os.getloadavg()[0]
        gc.disable()
        order = list(trees)
        for i, prompt in enumerate(prompts(runs)):
            proj, sid = projects[(i // 5) % 20], f"s{i // 5}"
            os.chdir(proj)
            for name in order if i % 2 == 0 else order[::-1]:
                home = homes[name]
                asks = (("context", event(home, proj, sid, "SessionStart", source="startup")),
                        ("recall", event(home, proj, sid, "UserPromptSubmit", prompt=prompt)))  # fmt: skip
                for sub, ev in asks:
                    t0 = time.perf_counter()
                    answer = wire[name].ask(sub, str(home.root), json.dumps(ev).encode())
                    took = (time.perf_counter() - t0) * 1000
                    if answer is None:
                        sys.exit(f"{name}: the daemon did not answer {sub}")
                    times.setdefault(f"{name} {sub}", []).append(took)
                    if sub == "recall":
                        times.setdefault(f"{name} recall, {KINDS[i % 4]}", []).append(took)
                    time.sleep(0.015)
        gc.enable()
        load = [load0, os.getloadavg()[0]]
    finally:
        os.chdir(REPO)
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(120)
    stats = {k: {"n": len(v), "p50": pct(v, 0.5), "p95": pct(v, 0.95), "max": max(v)} for k, v in times.items()}
    return {"memories": n, "load": load, "stats": stats}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--base", type=Path, required=True, help="a checkout of the tree to compare with")
    ap.add_argument("--memories", type=int, nargs="+", default=[2_000, 20_000])
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--workdir", type=Path)
    args = ap.parse_args()
    if not (args.base / "memd" / "agent" / "hookwire.py").is_file():
        print(f"--base {args.base}: not a memd checkout (no memd/agent/hookwire.py)", file=sys.stderr)
        return 2
    cli_defaults()
    work = Path(tempfile.mkdtemp(prefix="memd-bench-hookd-", dir=args.workdir))
    trees = {"base": args.base.resolve(), "this": REPO}
    try:
        scripts = {name: install(tree, work / f"venv-{name}") for name, tree in trees.items()}
        out = [measure(trees, scripts, work, n, args.prompts) for n in args.memories]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out, indent=2))
    for h in out:
        print(f"\n{h['memories']:,} memories, load {h['load'][0]:.1f}-{h['load'][1]:.1f}: ms, p50 / p95")
        for key in sorted(h["stats"], key=lambda k: (k.split(" ", 1)[1], k)):
            s = h["stats"][key]
            print(f"  {key:28s} {s['p50']:6.2f} / {s['p95']:6.2f}  (n {s['n']}, max {s['max']:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
