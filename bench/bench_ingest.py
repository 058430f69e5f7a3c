"""Issue 2 benchmarks: ingest speed against orjson parse-only, one small append to a
100 MB transcript, `memd sessions --json` over 10,000 idle sessions, peak RSS.

    .venv/bin/python bench/bench_ingest.py [--mb 500] [--workdir DIR]
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson  # noqa: E402

from bench.common import CORPUS, MEMD, pct, replicate_corpus, timed  # noqa: E402


def parse_only(root: Path) -> float:
    """Seconds for the same chunked line split + orjson.loads over every transcript byte."""
    t = time.perf_counter()
    for p in sorted(root.rglob("*.jsonl")):
        with open(p, "rb") as fh:
            carry = b""
            while chunk := fh.read(1 << 20):
                buf = carry + chunk
                lines = buf.split(b"\n")
                carry = lines.pop()
                for line in lines:
                    if line:
                        try:
                            orjson.loads(line)
                        except orjson.JSONDecodeError:
                            pass
    return time.perf_counter() - t


def ingest_bench(work: Path, mb: int) -> dict:
    home = work / "big"
    total = replicate_corpus(home, mb * 1_000_000)
    subprocess.run(["sync"])
    # warm the page cache for both contenders alike
    parse_only(home / "projects")
    t_parse = min(parse_only(home / "projects") for _ in range(2))
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    secs, r = timed([*MEMD, "--home", str(home), "scan", "--json"])
    assert r.returncode == 0, r.stderr
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    out = json.loads(r.stdout)
    return {
        "bytes": total,
        "ingest_s": secs,
        "ingest_MBps": total / 1e6 / secs,
        "parse_only_s": t_parse,
        "parse_only_MBps": total / 1e6 / t_parse,
        "ratio": t_parse / secs,
        "peak_rss_MB": max(peak_kb, before) / 1024,
        "records": out["records"],
        "sessions": out["sessions"],
    }


def append_bench(work: Path) -> dict:
    """A warm ledger (as in the daemon): one 1 KB append to a 100 MB transcript."""
    from memd import ledger, state
    from memd.tree import Home, discover_sessions

    home = Home(work / "append")
    p = home.projects / "k" / "s.jsonl"
    p.parent.mkdir(parents=True)
    src = (CORPUS / "spotter" / "ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl").read_bytes()
    with open(p, "wb") as fh:
        while fh.tell() < 100_000_000:
            fh.write(src)
    conn = state.connect(home.state_db)
    (sf,) = discover_sessions(home)
    ledger.ingest(conn, sf, "2026-01-01T00:00:00.000Z")
    rec = {"type": "user", "uuid": "x", "timestamp": "2026-01-01T00:00:00Z",
           "message": {"role": "user", "content": "a" * 900}}  # fmt: skip
    line = (json.dumps(rec) + "\n").encode()
    times = []
    for _ in range(50):
        with open(p, "ab") as fh:
            fh.write(line)
        t = time.perf_counter()
        r = ledger.ingest(conn, sf, "2026-01-01T00:00:00.000Z")
        times.append((time.perf_counter() - t) * 1000)
        assert r.records == 1
    conn.close()
    return {"file_MB": p.stat().st_size / 1e6, "append_bytes": len(line), "p50_ms": pct(times, 0.5),
            "p95_ms": pct(times, 0.95), "max_ms": max(times)}  # fmt: skip


def sessions_bench(work: Path) -> dict:
    home = work / "many"
    rec = json.dumps({"type": "user", "uuid": "u", "timestamp": "2026-01-01T00:00:00Z",
                      "message": {"role": "user", "content": "hello"}}) + "\n"  # fmt: skip
    for i in range(10_000):
        d = home / "projects" / f"-p{i // 100:03d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"s{i:05d}.jsonl").write_text(rec)
    _, r = timed([*MEMD, "--home", str(home), "scan"])
    assert r.returncode == 0, r.stderr
    walls = []
    for _ in range(7):
        secs, r = timed([*MEMD, "--home", str(home), "sessions", "--json"], text=False)
        assert r.returncode == 0
        walls.append(secs * 1000)
    n = len(json.loads(r.stdout))
    base = [timed([sys.executable, "-c", "pass"])[0] * 1000 for _ in range(5)]
    return {"sessions": n, "median_ms": pct(walls, 0.5), "max_ms": max(walls), "python_start_ms": pct(base, 0.5)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=500)
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="memd-bench-"))
    try:
        res = {"ingest": ingest_bench(work, args.mb), "append": append_bench(work), "sessions": sessions_bench(work)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
