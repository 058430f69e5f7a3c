"""Before and after a change of the house: the same real paths timed in two trees, alternated.

    .venv/bin/python bench/bench_house.py --before DIR [--runs 7] [--mb 60]

DIR is a checkout of the commit before the change with its own `.venv` (`git worktree add DIR
<commit>` and `python3 -m venv DIR/.venv && DIR/.venv/bin/pip install -e DIR`). Each measure is
the wall time of one `memd` process of that tree, start to exit, on the same input: a first
ingest (`memd scan` of a home of `--mb` MB of the corpus' transcripts, fresh state each run), the
hooks (`context --hook`, `recall --hook`, `precompact --hook`), `status` and `status --json`, and
whole job runs on a copy of the bundled sample (offline provider): summary, extraction, a forced
dream, and `remember` with git-backed memory on (one write, its history run and its commit). The
trees take turns, run by run, so a slow minute of the shared machine hits both alike; the result
is each measure's median and the ratio after ÷ before (under 1.0: faster after).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import CORPUS, REPO, need_corpus

HOOK_INPUT = {"session_id": "s-bench", "cwd": "/home/dev/webshop", "hook_event_name": "UserPromptSubmit",
              "prompt": "how do we run the tests before a deploy"}  # fmt: skip


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed memd has its bytecode
    return env


def _memd(tree: Path) -> list[str]:
    return [str(tree / ".venv" / "bin" / "memd")]


def _compile(tree: Path) -> None:
    subprocess.run([str(tree / ".venv" / "bin" / "python"), "-m", "compileall", "-q", str(tree / "memd"),
                    str(tree / "jobs")], check=True, stdout=subprocess.DEVNULL)  # fmt: skip


def _ingest_home(work: Path, mb: int) -> Path:
    """A home of about `mb` MB: the corpus' transcripts copied with fresh session ids."""
    src = work / "ingest-src"
    n, total = 0, 0
    files = [p for p in CORPUS.rglob("*.jsonl") if "subagents" not in p.parts]
    while total < mb * 1_000_000:
        for f in files:
            d = src / "projects" / f"-bench-{n % 40:02d}"
            d.mkdir(parents=True, exist_ok=True)
            data = f.read_bytes().replace(f.stem.encode(), f"{f.stem[:8]}-{n:06d}".encode())
            (d / f"{f.stem[:8]}-{n:06d}.jsonl").write_bytes(data)
            total += len(data)
            n += 1
    (src / "settings.json").write_text(json.dumps({"memd": {"provider": "offline"}}))
    return src


def _fresh(src: Path, dst: Path, keep_state: bool = False) -> Path:
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, symlinks=True)
    if not keep_state:
        shutil.rmtree(dst / "memd", ignore_errors=True)
    return dst


def _time(cmd: list[str], stdin: str | None = None, cwd: Path | None = None) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=_env(), cwd=cwd)
    took = time.perf_counter() - t0
    if r.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr[-500:]}")
    return took


def measures(work: Path, mb: int) -> dict[str, Callable[[Path], float]]:
    ingest_src = _ingest_home(work, mb)
    sample = REPO / "memd" / "sample_home"
    hooked = work / "hooked"
    _fresh(sample, hooked)
    subprocess.run([*_memd(REPO), "--home", str(hooked), "run-now", "all", "--force"], capture_output=True,
                   env=_env(), check=False)  # fmt: skip
    hook = json.dumps(HOOK_INPUT)

    def ingest(tree: Path) -> float:
        home = _fresh(ingest_src, work / "ingest")
        return _time([*_memd(tree), "--home", str(home), "scan"])

    def job(name: str, *extra: str) -> Callable[[Path], float]:
        def run(tree: Path) -> float:
            home = _fresh(sample, work / f"job-{name}")
            subprocess.run([*_memd(tree), "--home", str(home), "scan"], capture_output=True, env=_env(), check=True)
            return _time([*_memd(tree), "--home", str(home), "run-now", name, "--force", *extra])
        return run

    def remember_git(tree: Path) -> float:
        home = _fresh(sample, work / "remember")
        (home / "settings.json").write_text(json.dumps({"memd": {"provider": "offline", "git": True}}))
        subprocess.run([*_memd(tree), "--home", str(home), "remember", "--global", "warm up the repository"],
                       capture_output=True, env=_env(), check=False)  # fmt: skip
        return _time([*_memd(tree), "--home", str(home), "remember", "--global",
                      "We always run the linter before pushing a branch."])  # fmt: skip

    return {
        f"first ingest, {mb} MB (`memd scan`)": ingest,
        "`context --hook`": lambda t: _time([*_memd(t), "--home", str(hooked), "context", "--hook"], hook),
        "`recall --hook`": lambda t: _time([*_memd(t), "--home", str(hooked), "recall", "--hook"], hook),
        "`precompact --hook`": lambda t: _time([*_memd(t), "--home", str(hooked), "precompact", "--hook"], hook),
        "`status`": lambda t: _time([*_memd(t), "--home", str(hooked), "status"]),
        "`status --json`": lambda t: _time([*_memd(t), "--home", str(hooked), "status", "--json"]),
        "summary (`run-now summary --force`)": job("summary"),
        "extraction (`run-now extract --force`)": job("extract"),
        "dream (`run-now dream --global --force`)": job("dream", "--global"),
        "`remember` with git on (write + commit)": remember_git,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, type=Path)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--mb", type=int, default=60)
    ap.add_argument("--only", default="", help="only the measures whose name holds this text")
    args = ap.parse_args()
    need_corpus()
    before = args.before.resolve()
    if not (before / ".venv" / "bin" / "memd").exists():
        sys.exit(f"{before}: no .venv/bin/memd (see this script's docstring)")
    for tree in (before, REPO):
        _compile(tree)
    with tempfile.TemporaryDirectory(prefix="memd-house-") as tmp:
        work = Path(tmp)
        got: dict[str, dict[str, list[float]]] = {}
        for name, fn in measures(work, args.mb).items():
            if args.only not in name:
                continue
            got[name] = {"before": [], "after": []}
            fn(REPO)  # warm the page cache and any first-run work
            for i in range(args.runs):
                order = [("before", before), ("after", REPO)] if i % 2 == 0 else [("after", REPO), ("before", before)]
                for label, tree in order:
                    got[name][label].append(fn(tree))
        print(f"| measure (median of {args.runs}, wall) | before | after | after ÷ before |")
        print("|---|---:|---:|---:|")
        for name, r in got.items():
            b, a = statistics.median(r["before"]), statistics.median(r["after"])
            print(f"| {name} | {b * 1000:.0f} ms | {a * 1000:.0f} ms | {a / b:.2f} |")


if __name__ == "__main__":
    main()
