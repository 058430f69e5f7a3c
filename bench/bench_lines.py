"""Issue 16 benchmarks: a transcript without a newline, and one with a giant line.

    .venv/bin/python bench/bench_lines.py [--gb 1] [--line-mb 200] [--timeout 300] [--repo DIR] [--no-write]

Every case runs in a fresh process that imports memd from `--repo` (this checkout by default;
point it at an export of an older commit to measure that): wall time of the operation inside
the process, and the process's peak RSS as the kernel counts it (`wait4`). A case still running
after `--timeout` seconds is killed and reported unfinished, with its RSS so far.

* `no newline, first scan`: one session whose first line is complete, followed by `--gb` GB of
  bytes without a newline (a sparse file): `ledger.ingest` from zero.
* `no newline, next scan`: 1 KB more appended, still no newline: the next `ledger.ingest`.
* `giant line, ingest`: a complete line, a `--line-mb` MB JSON line, a complete line: `ledger.ingest`.
* `giant line, job read`: `spans.read_span` over that whole file (what extraction and the summary read).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, write_section

SECTION_TITLE = "## Long lines and files without newlines (issue 16)"
GOOD = json.dumps({"type": "user", "uuid": "u", "timestamp": "2026-01-01T00:00:00Z",
                   "message": {"role": "user", "content": "hello"}}).encode() + b"\n"  # fmt: skip

CHILD = r"""
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from memd import state
from memd.ledger import store as ledger
from memd.transcripts.spans import read_span
from memd.tree import Home
try:
    from memd.discovery import discover_sessions
except ImportError:  # an older memd (--before)
    from memd.tree import discover_sessions
home, op = Home(Path(sys.argv[2])), sys.argv[3]
out = {}
if op == "ingest":
    conn = state.connect(home.state_db)
    (sf,) = discover_sessions(home)
    t = time.perf_counter()
    r = ledger.ingest(conn, sf, "2026-01-01T00:00:00.000Z")
    out = {"secs": time.perf_counter() - t, "records": r.records, "bad": len(r.problems),
           "scanned": getattr(r, "bytes_scanned", None)}
else:
    p = Path(sys.argv[4])
    t = time.perf_counter()
    span = read_span(p, 0, p.stat().st_size, "claude")
    out = {"secs": time.perf_counter() - t, "pieces": len(span.pieces)}
print(json.dumps(out))
"""


def run_case(repo: Path, home: Path, op: str, timeout: float, *extra: str) -> dict:
    """One operation in a fresh process: its own timing, and its peak RSS from wait4."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(repo), str(home), op, *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    t = time.perf_counter()
    killed = False
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() - t > timeout:
            os.kill(proc.pid, signal.SIGKILL)
            _pid, status, usage = os.wait4(proc.pid, 0)
            killed = True
            break
        time.sleep(0.05)
    wall = time.perf_counter() - t
    out, err = proc.stdout.read(), proc.stderr.read()  # type: ignore[union-attr]
    proc.returncode = os.waitstatus_to_exitcode(status)
    res: dict = {"wall_s": wall, "peak_rss_MB": usage.ru_maxrss / 1024, "finished": not killed}
    if not killed:
        if proc.returncode != 0:
            raise SystemExit(f"{op} failed: {err.decode()[-2000:]}")
        res.update(json.loads(out))
    return res


def measure(work: Path, repo: Path, gb: float, line_mb: int, timeout: float) -> dict:
    res = {}
    home = work / "nonl"
    p = home / "projects" / "k" / "s.jsonl"
    p.parent.mkdir(parents=True)
    with open(p, "wb") as fh:
        fh.write(GOOD)
        fh.truncate(int(gb * (1 << 30)))  # sparse: never a newline after the first line
    res["no newline, first scan"] = {"file_MB": p.stat().st_size / 1e6, **run_case(repo, home, "ingest", timeout)}
    with open(p, "ab") as fh:
        fh.write(b"x" * 1024)
    res["no newline, next scan"] = {"file_MB": p.stat().st_size / 1e6, **run_case(repo, home, "ingest", timeout)}
    shutil.rmtree(home)

    home = work / "giant"
    p = home / "projects" / "k" / "s.jsonl"
    p.parent.mkdir(parents=True)
    with open(p, "wb") as fh:
        fh.write(GOOD)
        fh.write(b'{"type":"user","uuid":"g","message":{"role":"user","content":"')
        block = b"z" * (1 << 20)
        for _ in range(line_mb):
            fh.write(block)
        fh.write(b'"}}\n')
        fh.write(GOOD)
    res["giant line, ingest"] = {"file_MB": p.stat().st_size / 1e6, **run_case(repo, home, "ingest", timeout)}
    res["giant line, job read"] = {"file_MB": p.stat().st_size / 1e6,
                                   **run_case(repo, home, "span", timeout, str(p))}  # fmt: skip
    shutil.rmtree(home)
    return res


def section(res: dict, cmd: str, before: dict | None) -> str:
    rows = []
    for case, r in res.items():
        b = (before or {}).get(case)
        was = ""
        if b is not None:
            was = (f" | {b['secs']:.2f} s, {b['peak_rss_MB']:.0f} MB" if b["finished"]
                   else f" | unfinished after {b['wall_s']:.0f} s, {b['peak_rss_MB']:.0f} MB")  # fmt: skip
        rows.append(f"| {case} ({r['file_MB']:,.0f} MB) | {r['secs']:.3f} s | {r['peak_rss_MB']:.0f} MB{was} |")
    head = "| case | time | peak RSS | before: time, peak RSS |" if before else "| case | time | peak RSS |"
    sep = "|---|---:|---:|---:|" if before else "|---|---:|---:|"
    return f"""{SECTION_TITLE}

Command: `{cmd}`. Each case is one fresh process (memd imported, then the operation timed inside it);
peak RSS is the process's, from `wait4`, interpreter and imports included (about 25 MB). A line over the
limit (`transcripts.MAX_LINE`, 32 MiB) is never held, but one up to the limit is: RSS stays under the
limit plus the interpreter. The first scan of a new file without a newline reads each byte once, most
of its time the kernel filling the page cache for the sparse file; the next scan reads only what was
appended, from where the search for the newline stopped.

{head}
{sep}
""" + "\n".join(rows) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gb", type=float, default=1.0, help="size of the file without a newline")
    ap.add_argument("--line-mb", type=int, default=200, help="size of the giant line")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds before a case counts as unfinished")
    ap.add_argument("--repo", default=str(REPO), help="where to import memd from")
    ap.add_argument("--before", default=None, help="also measure memd from this directory (an older export)")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--no-write", action="store_true", help="print, do not update bench/RESULTS.md")
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="memd-bench-lines-"))
    try:
        res = measure(work, Path(args.repo), args.gb, args.line_mb, args.timeout)
        before = measure(work, Path(args.before), args.gb, args.line_mb, args.timeout) if args.before else None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"after": res, "before": before}, indent=2))
    if not args.no_write:
        cmd = f".venv/bin/python bench/bench_lines.py --gb {args.gb:g} --line-mb {args.line_mb}"
        if args.before:
            cmd += f" --timeout {args.timeout:g} --before <export of the previous commit>"
        write_section(SECTION_TITLE, section(res, cmd, before), REPO / "bench" / "RESULTS.md")


if __name__ == "__main__":
    main()
