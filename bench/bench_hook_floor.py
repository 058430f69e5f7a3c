"""Issue 27 point 3: the agent hooks against the interpreter's floor, from an installed wheel.

    .venv/bin/python bench/bench_hook_floor.py [--memories 2000 20000] [--runs 200] [--baseline-wheel W]

memd is built as a wheel (`pip wheel`) and installed into a fresh venv, as a user has it: pip
compiles its bytecode at install, and the `memd` script is the one pip writes. Each measure is
the wall time of one process, start to exit, interleaved so that each meets the same moments of
a shared machine: the floor (`python -c pass` with the venv's interpreter), `memd context --hook` (SessionStart) and `memd recall --hook`
(UserPromptSubmit, offline provider) with the hook's JSON on stdin, as Claude Code runs them
(bench_hooks.py's home, events and prompts). The ratios are taken against the floor measured in
the same run. `--baseline-wheel` times a second install (e.g. a wheel of main) alongside.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_hooks import build_home, event, prompts
from bench.common import REPO, pct, write_section
from memd import state
from memd.logs.events import cli_defaults
from memd.tree import Home

# The standard library a hook's work needs (its modules list, tests/cli/test_hook_entry.py): what any
# hook built on memd's modules pays before its first line of its own.
STDLIB = "import re, json, sqlite3, datetime, pathlib, dataclasses, typing, threading"
# What pip's `memd` script runs before memd's first line (distlib's template), and the entry without it.
PIP_WRAPPER = "import re, sys; sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])"
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
TITLE = "## Hooks near the floor (issue 27 point 3)"
TITLE_NO_DAEMON = "## Hooks near the floor without the daemon (issue 27 point 3)"
TITLE_SOCKET = "## Hooks near the floor: the daemon answers them (issue 27 point 3)"


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "PYTHON"))}


def install(wheel: Path, venv: Path) -> Path:
    """A fresh venv with `wheel` installed (and its dependencies); its `memd` script."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], check=True, env=_env(),
                   stderr=subprocess.DEVNULL)  # fmt: skip
    return venv / "bin" / "memd"


def build_wheel(out: Path) -> Path:
    """A wheel of the working tree, built from a copy of it (a stale `build/` must not leak in)."""
    src = out / "src"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__",
                                                             ".*_cache", "tests", "bench"))  # fmt: skip
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(src)], check=True,
                   stderr=subprocess.DEVNULL)  # fmt: skip
    return next(out.glob("memd-*.whl"))


class Timer:
    """Wall and CPU (user + system) time of each process, by label."""

    def __init__(self) -> None:
        self.wall: dict[str, list[float]] = {}
        self.cpu: dict[str, list[float]] = {}

    def run(self, label: str, cmd: list[str], stdin: bytes = b"", env: dict[str, str] | None = None) -> bytes:
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        r = subprocess.run(cmd, input=stdin, capture_output=True, env={**_env(), **(env or {})})
        took = time.perf_counter() - t
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if r.returncode != 0 or r.stderr:
            sys.exit(f"{label}: exit {r.returncode}: {r.stderr.decode()[-500:]}")
        self.wall.setdefault(label, []).append(took * 1000)
        self.cpu.setdefault(label, []).append((r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) * 1000)
        return r.stdout

    def stats(self, label: str) -> dict[str, float]:
        w = self.wall[label]
        return {"n": len(w), "p50": pct(w, 0.5), "p95": pct(w, 0.95), "cpu_p50": pct(self.cpu[label], 0.5)}


def start_daemon(memd: Path, home: Home) -> subprocess.Popen[bytes]:
    """`memd run` of the installed wheel on the bench home, once its hook socket is there and its start-up
    work (the ledger's stat pass, an index run per memory directory) is over: its log quiet for 5 s."""
    proc = subprocess.Popen([str(memd), "--home", str(home.root), "run"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=_env())  # fmt: skip
    settle(home, proc)
    return proc


def settle(home: Home, proc: subprocess.Popen[bytes]) -> None:
    """Until the daemon's hook socket is there and its log has been quiet for 5 s (its start-up work done)."""
    log = home.memd_dir / "logs" / "memd.jsonl"
    sock = home.memd_dir / "hook.sock"
    last, quiet_since, t0 = -1, time.monotonic(), time.monotonic()
    while time.monotonic() - t0 < 600:
        if proc.poll() is not None:
            sys.exit(f"memd run exited {proc.returncode}")
        size = log.stat().st_size if log.exists() else 0
        if size != last:
            last, quiet_since = size, time.monotonic()
        if sock.exists() and time.monotonic() - quiet_since > 5:
            return
        time.sleep(0.2)
    proc.kill()
    sys.exit("memd run did not settle within 10 min")


def answered_by_daemon(memd: Path, home: Home, proj: Path) -> bool:
    """Whether the daemon answered a SessionStart: the process then never loads the hooks' module."""
    python = memd.parent / "python"
    code = "import sys; sys.argv[0] = 'memd'; from memd.__main__ import main; main()"
    r = subprocess.run([str(python), "-X", "importtime", "-c", code, "--home", str(home.root), "context", "--hook"],
                       input=json.dumps(event(home, proj, "probe", "SessionStart", source="startup")).encode(),
                       capture_output=True, env=_env(), cwd=proj)  # fmt: skip (not the checkout's cwd: `-c` imports from it)
    return r.returncode == 0 and bool(r.stdout) and b"memd.agent.hooks" not in r.stderr


_HOOK_PROGRAMS: dict[tuple[str, str], list[str]] = {}


def hook_program(python: Path, home: Home) -> list[str]:
    """The hook's command line, sub-command aside, exactly as the install of `python` has `memd connect` write
    it for `home` (memd.agent.connect.hook_argv), asked once."""
    key = (str(python), str(home.root))
    if key not in _HOOK_PROGRAMS:
        code = "import json, sys; from memd.agent.connect import hook_argv; from memd.tree import Home; " \
               "print(json.dumps(hook_argv(Home(sys.argv[1]))))"
        r = subprocess.run([str(python), "-P", "-c", code, str(home.root)], capture_output=True, check=True, env=_env(),
                           cwd=home.root)  # fmt: skip
        _HOOK_PROGRAMS[key] = json.loads(r.stdout)
    return _HOOK_PROGRAMS[key]


def measure(scripts: dict[str, Path], home: Home, projects: list[Path], runs: int, python: Path,
            envs: dict[str, dict[str, str]] | None = None) -> dict[str, Any]:  # fmt: skip
    """`runs` rounds of: the two floors, then each install's SessionStart and recall hook (under each of `envs`,
    labelled by its key: e.g. the daemon answering, and the hook answering itself)."""
    t = Timer()
    envs = envs or {"": {}}
    args = ["--home", str(home.root)]
    for _ in range(3):  # warm the page cache
        for memd in scripts.values():
            t.run("warm", [str(memd), *args, "context", "--hook"],
                  json.dumps(event(home, projects[5], "warm", "SessionStart", source="startup")).encode())  # fmt: skip
    answered = recalled = 0
    for i, prompt in enumerate(prompts(runs)):
        proj, sid = projects[(i // 5) % 20], f"s{i // 5}"  # five prompts a session, in one project
        t.run("floor", [str(python), "-c", "pass"])
        t.run("stdlib", [str(python), "-c", STDLIB])
        if len(envs) > 1:  # --socket: what the `memd` script pip writes costs before memd (it imports `re`)
            t.run("wrapper", [str(python), "-c", PIP_WRAPPER])
            # the hooks as `memd connect` writes them (memd.agent.connect.hook_argv): no wrapper script, no `site`
            hook = hook_program(python, home)
            start = event(home, proj, f"{sid}w", "SessionStart", source="startup")
            t.run("hook context", [*hook, "context", "--hook"], json.dumps(start).encode())
            ask = event(home, proj, f"{sid}w", "UserPromptSubmit", prompt=prompt)
            t.run("hook recall", [*hook, "recall", "--hook"], json.dumps(ask).encode())
            # the program `memd connect` wrote before (`python -P -m memd`, `site` run), for the same-run ratio
            t.run("hook recall, -m", [str(python), "-P", "-m", "memd", *args, "recall", "--hook"], json.dumps(ask).encode())
        for name, memd in scripts.items():
            for tag, env in envs.items():
                start = event(home, proj, f"{sid}{'x' if tag else ''}", "SessionStart", source="startup")
                answered += bool(t.run(f"{name} context{tag}", [str(memd), *args, "context", "--hook"],
                                       json.dumps(start).encode(), env).strip())  # fmt: skip
                ask = event(home, proj, f"{sid}{'x' if tag else ''}", "UserPromptSubmit", prompt=prompt)
                recalled += bool(t.run(f"{name} recall{tag}", [str(memd), *args, "recall", "--hook"],
                                       json.dumps(ask).encode(), env).strip())  # fmt: skip
    labels = [k for k in t.wall if k != "warm"]
    return {"stats": {k: t.stats(k) for k in labels}, "answered": answered, "recalled": recalled}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--memories", type=int, nargs="+", default=[2_000, 20_000])
    ap.add_argument("--runs", type=int, default=100, help="rounds per home (each: floors, SessionStart, recall)")
    ap.add_argument("--baseline-wheel", type=Path, help="also time this wheel's install (e.g. one built from main)")
    ap.add_argument(
        "--no-daemon",
        action="store_true",
        help="nothing holds the state database open: each hook's close checkpoints its WAL (two fsyncs)",
    )
    ap.add_argument(
        "--socket",
        action="store_true",
        help="a real `memd run` on the home: each hook answered by it, and answering itself (MEMD_HOOK_SOCKET=off)",
    )
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--no-write", action="store_true", help="print the results, leave RESULTS.md alone")
    args = ap.parse_args()
    cli_defaults()
    work = Path(tempfile.mkdtemp(prefix="memd-bench-floor-", dir=args.workdir))
    try:
        scripts = {"memd": install(build_wheel(work / "dist"), work / "venv")}
        if args.baseline_wheel:
            scripts["baseline"] = install(args.baseline_wheel, work / "venv-baseline")
        homes = []
        for n in args.memories:
            home, projects = build_home(work / f"m{n}", args.sessions, n)
            if args.socket:
                proc = start_daemon(scripts["memd"], home)
                try:
                    if not answered_by_daemon(scripts["memd"], home, projects[0]):
                        sys.exit("the daemon did not answer the probe hook")
                    load0 = os.getloadavg()[0]
                    r = measure(scripts, home, projects, args.runs, work / "venv" / "bin" / "python",
                                {"": {}, ", itself": {"MEMD_HOOK_SOCKET": "off"}})  # fmt: skip
                finally:
                    proc.terminate()
                    proc.wait(180)
                homes.append({"memories": n, **r, "load": [load0, os.getloadavg()[0]]})
                shutil.rmtree(work / f"m{n}", ignore_errors=True)
                continue
            load0 = os.getloadavg()[0]
            daemon = None if args.no_daemon else state.connect(home.state_db)  # held open, as `memd run` does
            try:
                r = measure(scripts, home, projects, args.runs, work / "venv" / "bin" / "python")
            finally:
                if daemon is not None:
                    daemon.close()
            homes.append({"memories": n, **r, "load": [load0, os.getloadavg()[0]]})
            shutil.rmtree(work / f"m{n}", ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res = {"sessions": args.sessions, "runs": args.runs, "homes": homes, "daemon": not args.no_daemon,
           "baseline": str(args.baseline_wheel) if args.baseline_wheel else None}  # fmt: skip
    print(json.dumps(res, indent=2))
    if not args.no_write:
        title = TITLE_SOCKET if args.socket else TITLE_NO_DAEMON if args.no_daemon else TITLE
        write_section(title, render_socket(res, args) if args.socket else render(res, args), RESULTS)
    return 0


def render(r: dict[str, Any], args: argparse.Namespace) -> str:
    cmd = "`.venv/bin/python bench/bench_hook_floor.py"
    if args.memories != [2_000, 20_000] or args.runs != 100 or args.sessions != 10_000:
        cmd += f" --sessions {args.sessions} --memories {' '.join(map(str, args.memories))} --runs {args.runs}"
    if args.baseline_wheel:
        cmd += " --baseline-wheel <wheel of main>"
    if args.no_daemon:
        cmd += " --no-daemon"
    cmd += "`"
    daemon = (["Nothing else holds the state database open (no daemon): each hook's close is the last one and checkpoints",
               "the WAL, two fsyncs, which a shared disk makes long."] if args.no_daemon else
              ["The state database is held open by the bench, as the running daemon holds it (`memd run`): a hook's close",
               "then does not checkpoint the WAL (`--no-daemon` measures without; its own section)."])  # fmt: skip
    lines = [
        TITLE_NO_DAEMON if args.no_daemon else TITLE, "",
        f"Command: {cmd} (2 cores shared with other work; the 1-minute load average at each home's start and",
        "end is in its row). memd from a wheel installed into a fresh venv (bytecode compiled by pip, the",
        "`memd` script pip writes); the hooks' JSON on stdin as Claude Code sends it; offline provider. Each",
        f"round runs the floor, SessionStart and a recall one after the other, {r['runs']} rounds a home, so every",
        "ratio is against the floor measured in the same run, at the same moments. Floor: `python -c pass` with",
        "the venv's interpreter (the `memd` script's; a plain `python3` on PATH here is pyenv's shell shim).",
        *daemon,
        "Target: each hook's p95 ≤ 2 × the floor's p50.",
        "",
        "| memories | command | p50 ms | p95 ms | CPU p50 ms | p95 ÷ floor p50 | p95 ÷ floor p95 | load |",
        "|---:|---|---:|---:|---:|---:|---:|---|",
    ]  # fmt: skip
    names = {"floor": "`python -c pass` (the floor)", "stdlib": f"`python -c '{STDLIB}'`",
             "memd context": "`memd context --hook`", "memd recall": "`memd recall --hook`",
             "baseline context": "`memd context --hook`, baseline", "baseline recall": "`memd recall --hook`, baseline"}  # fmt: skip
    for h in r["homes"]:
        s, floor = h["stats"], h["stats"]["floor"]
        for label, v in s.items():
            ratio = "—" if label == "floor" else f"**{v['p95'] / floor['p50']:.2f}**"
            ratio95 = "—" if label == "floor" else f"{v['p95'] / floor['p95']:.2f}"
            lines.append(f"| {h['memories']:,} | {names.get(label, label)} | {v['p50']:.1f} | {v['p95']:.1f} | "
                         f"{v['cpu_p50']:.1f} | {ratio} | {ratio95} | {h['load'][0]:.1f}–{h['load'][1]:.1f} |")  # fmt: skip
    for h in r["homes"]:
        s = h["stats"]
        if "stdlib" in s:
            cpu = {k: v["cpu_p50"] for k, v in s.items()}
            lines += ["", f"CPU at {h['memories']:,} memories (p50): the floor {cpu['floor']:.0f} ms; the standard library a hook's work",
                      f"needs, imported alone, {cpu['stdlib']:.0f} ms ({cpu['stdlib'] / cpu['floor']:.1f} × the floor); memd's modules and",
                      f"the work add {cpu['memd context'] - cpu['stdlib']:.0f} ms (SessionStart) and {cpu['memd recall'] - cpu['stdlib']:.0f} ms (recall)."]  # fmt: skip
    lines += ["", f"Home: {r['sessions']:,} sessions in the ledger, the memories over 20 git projects and the global drawer,",
              "indexed (bench_hooks.py's). A quarter of the prompts name a topic, a quarter ask to fix something, a quarter",
              "are Chinese, a quarter name nothing memory holds.", ""]  # fmt: skip
    return "\n".join(lines)


def render_socket(r: dict[str, Any], args: argparse.Namespace) -> str:
    """The `--socket` section: each hook answered by the running daemon and answering itself, against the floor."""
    cmd = f"`.venv/bin/python bench/bench_hook_floor.py --socket --sessions {args.sessions} --memories " \
          f"{' '.join(map(str, args.memories))} --runs {args.runs}`"
    lines = [
        TITLE_SOCKET, "",
        f"Command: {cmd} (2 cores shared with other work; the 1-minute load average at each home's start",
        "and end is in its row). memd from a wheel installed into a fresh venv (bytecode compiled by pip, the `memd`",
        "script pip writes); a real `memd run` of that install on the home, settled (its log quiet for 5 s) before the",
        "first round; the hooks' JSON on stdin as Claude Code sends it; offline provider. Each round runs the floor",
        "(`python -c pass` with the venv's interpreter), the standard library a hook's work needs, then SessionStart",
        "and a recall answered by the daemon over `<home>/memd/hook.sock`, then the same two answering themselves in",
        f"the same process as before (`MEMD_HOOK_SOCKET=off`, the daemon still running): {r['runs']} rounds a home,",
        "so every ratio is against the floor measured in the same run, at the same moments. Before the rounds, one",
        "SessionStart run with `-X importtime` showed the daemon answered (the process never loaded `memd.agent.hooks`).",
        "Target: each hook's p95 ≤ 2 × the floor's p50.",
        "",
        "| memories | command | p50 ms | p95 ms | CPU p50 ms | p50 ÷ floor p50 | p95 ÷ floor p50 | p95 ÷ floor p95 | load |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]  # fmt: skip
    names = {"floor": "`python -c pass` (the floor)", "stdlib": f"`python -c '{STDLIB}'`",
             "memd context": "`memd context --hook`, the daemon answers", "memd recall": "`memd recall --hook`, the daemon answers",
             "memd context, itself": "`memd context --hook`, answering itself",
             "wrapper": "`python -c` what pip's `memd` script runs before memd (`import re`, one `re.sub`)",
             "hook context": "`python -S -P -c <memd's entry> … context --hook` as `memd connect` writes it, the daemon answers",
             "hook recall, -m": "`python -P -m memd … recall --hook` as `memd connect` wrote it before, the daemon answers",
             "hook recall": "`python -S -P -c <memd's entry> … recall --hook` as `memd connect` writes it, the daemon answers",
             "memd recall, itself": "`memd recall --hook`, answering itself"}  # fmt: skip
    for h in r["homes"]:
        s, floor = h["stats"], h["stats"]["floor"]
        for label, v in s.items():
            ratios = ("—", "—", "—") if label == "floor" else (
                f"{v['p50'] / floor['p50']:.2f}", f"**{v['p95'] / floor['p50']:.2f}**", f"{v['p95'] / floor['p95']:.2f}")
            lines.append(f"| {h['memories']:,} | {names.get(label, label)} | {v['p50']:.1f} | {v['p95']:.1f} | "
                         f"{v['cpu_p50']:.1f} | {' | '.join(ratios)} | {h['load'][0]:.1f}–{h['load'][1]:.1f} |")  # fmt: skip
    lines += ["", f"Home: {r['sessions']:,} sessions in the ledger, the memories over 20 git projects and the global drawer,",
              "indexed (bench_hooks.py's). A quarter of the prompts name a topic, a quarter ask to fix something, a quarter",
              "are Chinese, a quarter name nothing memory holds.", ""]  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
