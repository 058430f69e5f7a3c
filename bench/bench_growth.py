"""Issue 27 pt 4 benchmark: passes that must grow with the memories, not faster, against main.

Each pass runs in a child process on this tree and on main's `memd` and `jobs` (exported with
`git archive` into a temporary directory), the two alternated, in the same run; the figure is the
ratio of the two CPU times (`resource.getrusage` of the child: the machine is shared, wall time is
noise) and each side's fitted growth exponent (least squares of log time on log size):

* `dups`: `jobs.dream.duplicates.near_duplicate_groups` over one scope of n memories (four types,
  bench_dream's Zipf prose, one planted near-duplicate in 19), the groups checked equal on both sides;
* `dream`: a whole offline dream (`run_job`, provider offline) over one scope of n memories;
* `snapshot`: `memd.history.snapshots.snapshot` of a scope of n files: wall time, since an fsync
  waits without spending CPU;
* `list`: `memd list --all --json` over a home of n memories in scopes of 2,500, search.sqlite current.

`--table`: the growth table of issue 27 pt 4, each command a process on a home of its own per side
(the same files copied with `cp -a`, then indexed or scanned by that side: main at a06201f refuses
the newer state schema, and each side keeps its own records), both trees byte-compiled as an
installed memd is (a child with PYTHONDONTWRITEBYTECODE set compiles every module every run).
`--homes DIR` keeps the homes for the next run; `--base a06201f` compares with the issue's main.

    .venv/bin/python bench/bench_growth.py [--sizes 1000,5000,10000] [--passes dups,dream,snapshot,list]
        [--repeat 1] [--no-write]
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, write_section

SECTION_TITLE = "## Growth with the memories (issue 27, point 4)"

CHILD = textwrap.dedent(
    """
    import json, os, random, resource, sys, time, tempfile, shutil
    from pathlib import Path
    tree, bench_repo, what, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    sys.path.insert(0, tree)
    sys.path.insert(1, bench_repo)
    import jobs.dream, memd  # from `tree`, before bench_dream puts the repo first
    assert jobs.__file__.startswith(tree) and memd.__file__.startswith(tree), (jobs.__file__, memd.__file__)

    def cpu():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    def memories(n):
        rng = random.Random(7)
        out, i = [], 0
        while len(out) < n:
            desc, body, typ = sentence(rng, rng.randint(5, 12)), body_of(rng), TYPES[i % 4]
            out.append(Memory(Path(f"/m/t{i}.md"), f"t{i}", desc, typ, body, 1.7e9 + i, len(body)))
            if i % 19 == 3:
                out.append(Memory(Path(f"/m/t{i}-dup.md"), f"t{i}-dup", desc, typ, body.replace(".", "!", 1), 1.7e9 + i + 0.5, len(body)))
            i += 1
        return out[:n]

    if what == "dups":
        from bench.bench_dream import sentence, body_of, TYPES
        from memd.memory.file import Memory
        from jobs.dream.duplicates import near_duplicate_groups
        mems = memories(n)
        t = cpu()
        groups = near_duplicate_groups(mems)
        print(json.dumps({"cpu": cpu() - t, "groups": sorted(sorted(m.name for m in g) for g in groups)}))
    elif what in ("dream", "snapshot"):
        # The scope was built once by the parent (`template`, this tree's bench_dream); each side copies
        # it and runs with its own modules, whatever their layout (a06201f had memd/runner.py, memd/swap.py).
        import hashlib, logging, structlog
        from datetime import UTC, datetime
        from memd import state
        from memd.settings import parse_text
        from memd.tree import Home, Place
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
        template, key = Path(sys.argv[5]), sys.argv[6]
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
            base = Path(tmp) / "base"
            shutil.copytree(template, base, symlinks=True)
            ref = Place("project", key)
            if what == "dream":
                # By the tree's files, not ImportError: an editable install's finder answers `memd.job` from
                # the installed tree when `tree` (a06201f's flat layout) has none.
                if os.path.exists(os.path.join(tree, "memd", "job", "runner.py")):
                    from memd.job.context import JobContext
                    from memd.job.runner import run_job
                else:
                    from memd.jobctx import JobContext
                    from memd.runner import run_job
                now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)  # injected: `updated:` stamps equal on both sides
                h = Home(base)
                ctx = JobContext(h, parse_text('{"memd": {"provider": "offline"}}'), state.connect(h.state_db),
                                 lambda: now, structlog.get_logger("bench"))
                t, w = cpu(), time.perf_counter()
                r = run_job(ctx, jobs.dream, ref, force=True)
                took, wall = cpu() - t, time.perf_counter() - w
                d = ref.memory_dir(h)
                digest, index, kept = hashlib.sha256(), "", True
                for p in sorted(d.iterdir()):  # what the dream left; MEMORY.md apart (its format changed since a06201f)
                    data = p.read_bytes()
                    if p.name == "MEMORY.md":
                        index = hashlib.sha256(data).hexdigest()
                        continue
                    digest.update(repr((p.name, data)).encode())
                    was = template / d.relative_to(base) / p.name
                    if was.exists() and was.read_bytes() == data:  # a file the run left alone keeps its mtime
                        kept = kept and was.stat().st_mtime_ns == p.stat().st_mtime_ns
                [run_json] = list((h.history_dir / ref.history_name).glob("*/run.json"))
                changes = json.loads(run_json.read_text())["changes"]
                print(json.dumps({"cpu": took, "wall": wall, "outcome": r.outcome, "files": digest.hexdigest(),
                                  "mtimes_kept": kept, "index": index,
                                  "changes": hashlib.sha256(json.dumps(changes, sort_keys=True).encode()).hexdigest(),
                                  "summary": r.reason.split(": ", 1)[-1]}))
            else:
                if os.path.exists(os.path.join(tree, "memd", "history", "snapshots.py")):
                    from memd.history import snapshots as swap
                else:
                    from memd import swap
                w, t = time.perf_counter(), cpu()
                swap.snapshot(Home(base), ref, "20260101T000000Z-aaaaaa")
                print(json.dumps({"cpu": cpu() - t, "wall": time.perf_counter() - w}))
    """
)


BASE = "main"  # `--base REF`: the tree compared against (the figures were taken on a06201f)


def export_main(dest: Path) -> Path:
    """main's (or `--base`'s) `memd` and `jobs` packages, as committed, in `dest`."""
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", BASE, "memd", "jobs"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def scope_template(root: Path, n: int) -> Path:
    """A home holding one scope of n memories (bench_dream's, built by this tree), copied by each child."""
    home = root / f"scope{n}"
    if not home.exists():
        sys.path.insert(0, str(REPO))
        import bench.bench_dream as B  # noqa: PLC0415 - imports memd: only in the parent, after its path is set

        B.MEMORIES = n
        (home / "projects").mkdir(parents=True)
        B.build_scope(home, random.Random(7))
    return home


def child(tree: Path, what: str, n: int, template: Path | None = None) -> dict[str, Any]:
    extra = [str(template), "-bench-dream"] if template is not None else []
    r = subprocess.run([sys.executable, "-c", CHILD, str(tree), str(REPO), what, str(n), *extra], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{what} at {n} on {tree}: {r.stderr[-2000:]}")
    return dict(json.loads(r.stdout.strip().splitlines()[-1]))


def memory_files(root: Path, n: int) -> Path:
    """n memories in scopes of 2,500 (files only: each side copies them and indexes its copy)."""
    sys.path.insert(0, str(REPO))
    from bench.bench_dream import body_of, sentence  # noqa: PLC0415 - imports memd: only in the parent, after its path is set
    from memd.memory.file import render_memory  # noqa: PLC0415 - as above

    home = root / "files" / f"home{n}"
    if (home / ".complete").exists():
        return home
    rng = random.Random(5)
    for i in range(n):
        d = home / "projects" / f"-p{i // 2500:03d}" / "memory"
        d.mkdir(parents=True, exist_ok=True)
        typ = ("user", "feedback", "project", "reference")[i % 4]
        (d / f"m{i:05d}.md").write_text(render_memory(f"m{i:05d}", sentence(rng, 8), typ, body_of(rng), {"source": "memd"}))
    (home / ".complete").touch()
    return home


def memd_run(tree: Path, home: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "memd", "--home", str(home), *args], check=True, capture_output=True,
                   env=child_env(tree), cwd=tree)  # fmt: skip


def child_env(tree: Path) -> dict[str, str]:
    """The child's environment: `tree` first on the path, bytecode used as an installed memd has it."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def side_home(root: Path, side: str, tree: Path, files: Path, ready: tuple[str, ...]) -> Path:
    """`files` copied (`cp -a`: same names, sizes, mtimes) for one side, which builds its own state
    with `ready` (`run-now index` or `scan`): each tree reads only databases it wrote itself (main
    at a06201f refuses a newer state schema)."""
    home = root / side / files.name
    if not (home / ".complete").exists():
        if home.exists():
            shutil.rmtree(home)
        home.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-a", str(files), str(home)], check=True)
        (home / ".complete").unlink(missing_ok=True)
        (home / "memd").mkdir(exist_ok=True)
        memd_run(tree, home, *ready)
        (home / ".complete").touch()
    return home


def list_home(root: Path, n: int, side: str = "here", tree: Path = REPO) -> Path:
    """n memories in scopes of 2,500, indexed by `tree` (search.sqlite current)."""
    return side_home(root, side, tree, memory_files(root, n), ("run-now", "index"))


def list_cpu(tree: Path, home: Path) -> dict[str, Any]:
    code = "import sys; from memd.cli import main; sys.argv = ['memd'] + sys.argv[1:]; main()"
    before = os.times()
    r = subprocess.run([sys.executable, "-c", code, "--home", str(home), "list", "--all", "--json"], capture_output=True,
                       env=child_env(tree), cwd=tree)  # fmt: skip  # cwd: `-c` puts it first on the path
    after = os.times()
    if r.returncode != 0:
        raise SystemExit(f"list on {tree}: {r.stderr[-2000:]!r}")
    return {"cpu": (after.children_user - before.children_user) + (after.children_system - before.children_system),
            "out": len(r.stdout)}  # fmt: skip


def session_files(root: Path, n: int) -> Path:
    """n one-record sessions in projects of 100 (files only)."""
    home = root / "files" / f"sessions{n}"
    if not (home / ".complete").exists():
        rec = json.dumps({"type": "user", "uuid": "u", "timestamp": "2026-01-01T00:00:00Z", "sessionId": "s",
                          "message": {"role": "user", "content": "hi"}}) + "\n"  # fmt: skip
        for i in range(n):
            d = home / "projects" / f"-p{i // 100:04d}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"s{i:06d}.jsonl").write_text(rec)
        (home / ".complete").touch()
    return home


def session_home(root: Path, n: int, side: str = "here", tree: Path = REPO) -> Path:
    """n one-record sessions in projects of 100, ingested by `tree` (`memd scan`), no memories."""
    return side_home(root, side, tree, session_files(root, n), ("scan",))


# The growth table's commands (issue 27 pt 4): each a process, CPU of the child; "index check" is the second
# `run-now index` after a rebuild (nothing changed); "rebuild" is `run-now index` with search.sqlite removed.
MEMORY_COMMANDS: dict[str, list[str]] = {
    "list": ["list", "--all", "--json"],
    "search": ["search", "deploy", "--project", "-p000", "--json"],
    "recall": ["recall", "how do we deploy the staging build", "--project", "-p000", "--json"],
    "index check": ["run-now", "index"],
}
SESSION_COMMANDS: dict[str, list[str]] = {
    "status": ["status", "--json"],
    "sessions": ["sessions", "--json"],
    "run-now index (sessions home)": ["run-now", "index"],
}


@functools.cache
def script_entry(tree: Path) -> str:
    """The `module:function` the tree's own `memd` script runs (`[project.scripts]` of its pyproject.toml:
    `memd.cli:main` at a06201f, `memd.__main__:main` since), so each side is timed as its user runs it."""
    import tomllib  # noqa: PLC0415 - only for the growth table

    ref = None if tree == REPO else BASE
    text = (tree / "pyproject.toml").read_text() if ref is None else subprocess.run(
        ["git", "-C", str(REPO), "show", f"{ref}:pyproject.toml"], check=True, capture_output=True, text=True).stdout
    return str(tomllib.loads(text)["project"]["scripts"]["memd"])


def process_cpu(tree: Path, home: Path, args: list[str]) -> float:
    module, _, function = script_entry(tree).partition(":")
    code = f"import sys; from {module} import {function} as main; sys.argv = ['memd'] + sys.argv[1:]; main()"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)  # microseconds (os.times counts 10 ms ticks)
    r = subprocess.run([sys.executable, "-c", code, "--home", str(home), *args], capture_output=True,
                       env=child_env(tree), cwd=tree)  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode not in (0, 1):
        raise SystemExit(f"{args} on {tree}: {r.stderr[-2000:]!r}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def growth_table(root: Path, main_tree: Path, memory_sizes: list[int], session_sizes: list[int], repeat: int,
                 only: set[str] | None = None) -> dict[str, Any]:  # fmt: skip
    """Every command of the table (or those named in `only`) at every size, on main and on this tree,
    alternated; best of `repeat`. Each side runs on its own copy of each home (`side_home`)."""
    out: dict[str, Any] = {}
    trees = (("main", main_tree), ("here", REPO))
    mem = {n: {side: list_home(root, n, side, tree) for side, tree in trees} for n in memory_sizes}
    ses = {n: {side: session_home(root, n, side, tree) for side, tree in trees} for n in session_sizes}
    jobs = [(name, args, n, mem[n]) for n in memory_sizes for name, args in MEMORY_COMMANDS.items()]
    jobs += [(name, args, n, ses[n]) for n in session_sizes for name, args in SESSION_COMMANDS.items()]
    jobs += [("rebuild", ["run-now", "index"], n, mem[n]) for n in memory_sizes]
    jobs = [j for j in jobs if only is None or j[0] in only]
    for name, args, n, homes in jobs:
        best: dict[str, float] = {}
        for _ in range(repeat):
            for side, tree in trees:
                home = homes[side]
                if name == "rebuild":
                    for suffix in ("", "-wal", "-shm"):
                        (home / "memd" / f"search.sqlite{suffix}").unlink(missing_ok=True)
                elif name == "index check":
                    process_cpu(tree, home, args)  # nothing changed since (a rebuild may have run last)
                best[side] = min(best.get(side, math.inf), process_cpu(tree, home, args))
        out.setdefault(name, []).append({"n": n, "main": best["main"], "here": best["here"]})
        print(name, out[name][-1], flush=True)
    for rows in out.values():
        sizes = [r["n"] for r in rows]
        if len(sizes) > 1:
            rows.append({"exp_main": exponent(sizes, [r["main"] for r in rows]),
                         "exp_here": exponent(sizes, [r["here"] for r in rows])})  # fmt: skip
    return out


def compiled(tree: Path) -> Path:
    """`tree`'s modules byte-compiled, as an installed wheel has them (a child with
    PYTHONDONTWRITEBYTECODE set would otherwise compile every module in every run)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "memd"), str(tree / "jobs")], check=True,
                   capture_output=True)  # fmt: skip
    return tree


def exponent(sizes: list[int], times: list[float]) -> float:
    xs, ys = [math.log(s) for s in sizes], [math.log(max(t, 1e-6)) for t in times]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def measure(sizes: list[int], passes: list[str], repeat: int) -> dict[str, Any]:
    out: dict[str, Any] = {"sizes": sizes, "load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        main_tree = compiled(export_main(Path(tmp) / "main"))
        compiled(REPO)
        for what in passes:
            rows = []
            for n in sizes:
                template = scope_template(Path(tmp), n) if what in ("dream", "snapshot") else None
                best: dict[str, Any] = {}
                for _ in range(repeat):
                    for side, tree in (("main", main_tree), ("here", REPO)):  # alternated
                        home = list_home(Path(tmp), n, side, tree) if what == "list" else None
                        got = list_cpu(tree, home) if home is not None else child(tree, what, n, template)
                        key = "wall" if what == "snapshot" else "cpu"
                        best[side] = min(best.get(side, math.inf), float(got[key]))
                        if what == "dream":  # the same plan and the same bytes written, or the figure means nothing
                            result = (got["outcome"], got["summary"], got["changes"], got["files"], got["mtimes_kept"])
                            assert best.setdefault("result", result) == result, f"dream results differ at {n}: {result}"
                        if what == "dups":
                            best.setdefault(f"groups_{side}", len(got["groups"]))
                            best.setdefault(f"sig_{side}", hash(json.dumps(got["groups"])))
                if what == "dups":
                    assert best["sig_main"] == best["sig_here"], f"groups differ at {n}"
                rows.append({"n": n, "main": best["main"], "here": best["here"], "groups": best.get("groups_here"),
                             "result": best.get("result")})  # fmt: skip
                print(what, rows[-1], flush=True)
            out[what] = {"rows": rows, "exp_main": exponent(sizes, [r["main"] for r in rows]) if len(sizes) > 1 else None,
                         "exp_here": exponent(sizes, [r["here"] for r in rows]) if len(sizes) > 1 else None}  # fmt: skip
    out["load_after"] = os.getloadavg()
    return out


def section(r: dict[str, Any], command: str) -> str:
    names = {"dups": "near-duplicate check (CPU)", "dream": "offline dream, whole run (CPU)",
             "snapshot": "scope snapshot (wall: fsync waits)", "list": "`memd list --all --json` (CPU, process)"}  # fmt: skip
    lines = [SECTION_TITLE, "", f"Command: `{command}`", "",
             "Each pass on this tree and on main (`git archive main memd jobs`, run from the export), alternated in",
             "one run, best of the repeats; CPU from `getrusage` of the child. The machine is shared by 8+ engineers",
             f"on 2 cores (load {r['load_before'][0]:.1f} before, {r['load_after'][0]:.1f} after): ratios, not absolute",
             "times, are the figures. Growth = fitted exponent of time on size.", "",
             "| pass | memories | main | this tree | this ÷ main |", "|---|---:|---:|---:|---:|"]  # fmt: skip
    for what, name in names.items():
        if what not in r:
            continue
        for row in r[what]["rows"]:
            lines.append(f"| {name} | {row['n']:,} | {row['main']:.3f} s | {row['here']:.3f} s | {row['here'] / row['main']:.2f} |")
        if r[what]["exp_main"] is not None:
            lines.append(f"| {name}: growth exponent | | {r[what]['exp_main']:.2f} | {r[what]['exp_here']:.2f} | |")
    return "\n".join(lines) + "\n"


def table_section(r: dict[str, Any], command: str, load: tuple[float, float]) -> str:
    lines = ["### Growth table: each command as a process, main and this tree (issue 27, point 4)", "",
             f"Command: `{command}` (load {load[0]:.1f} before, {load[1]:.1f} after). CPU (user+sys) of the",
             "child process, best of the repeats, main and this tree alternated in one run. Growth = fitted",
             "exponent of CPU on size (1.0: linear; the process start-up, ~0.1-0.3 s, flattens it at small sizes).", "",
             "| command | size | main | this tree | this ÷ main |", "|---|---:|---:|---:|---:|"]  # fmt: skip
    for name, rows in r.items():
        unit = "sessions" if name in SESSION_COMMANDS else "memories"
        for row in rows:
            if "n" in row:
                lines.append(f"| {name} | {row['n']:,} {unit} | {row['main']:.2f} s | {row['here']:.2f} s | {row['here'] / row['main']:.2f} |")
            else:
                lines.append(f"| {name}: growth exponent | | {row['exp_main']:.2f} | {row['exp_here']:.2f} | |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,5000,10000")
    ap.add_argument("--passes", default="dups,snapshot,dream,list")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--table", action="store_true", help="the growth table of processes instead of the passes")
    ap.add_argument("--memory-sizes", default="1000,10000,50000")
    ap.add_argument("--session-sizes", default="1000,10000,100000")
    ap.add_argument("--homes", help="keep the built homes here (reused by the next run)")
    ap.add_argument("--base", default="main", help="the git ref compared against (default main)")
    ap.add_argument("--commands", help="only these rows of the table, comma-separated (e.g. 'list,index check')")
    args = ap.parse_args()
    global BASE
    BASE = args.base
    if args.table:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(args.homes) if args.homes else Path(tmp) / "homes"
            root.mkdir(parents=True, exist_ok=True)
            before = os.getloadavg()[0]
            compiled(REPO)
            sizes = [[int(x) for x in given.split(",") if x] for given in (args.memory_sizes, args.session_sizes)]
            only = set(args.commands.split(",")) if args.commands else None
            r = growth_table(root, compiled(export_main(Path(tmp) / "main")), sizes[0], sizes[1], args.repeat, only)
            print(json.dumps(r, indent=2))
            cmd = (f".venv/bin/python bench/bench_growth.py --table --memory-sizes {args.memory_sizes} "
                   f"--session-sizes {args.session_sizes} --repeat {args.repeat}")  # fmt: skip
            if not args.no_write:
                text = table_section(r, cmd, (before, os.getloadavg()[0]))
                write_section("### Growth table: each command as a process, main and this tree (issue 27, point 4)", text,
                              REPO / "bench" / "RESULTS.md")  # fmt: skip
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    r = measure(sizes, args.passes.split(","), args.repeat)
    print(json.dumps(r, indent=2))
    if not args.no_write:
        cmd = f".venv/bin/python bench/bench_growth.py --sizes {args.sizes} --passes {args.passes} --repeat {args.repeat}"
        write_section(SECTION_TITLE, section(r, cmd), REPO / "bench" / "RESULTS.md")


if __name__ == "__main__":
    main()
