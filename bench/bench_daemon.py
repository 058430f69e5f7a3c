"""Issue 3 benchmarks: append → job start latency (file events and polling), idle daemon
CPU and RSS over 10,000 sessions, and `memd status` wall time.

    .venv/bin/python bench/bench_daemon.py [--appends 200] [--idle-seconds 60]
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
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil

from bench.common import MEMD, pct, start_daemon, timed


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}


def _stop(p: subprocess.Popen[bytes]) -> None:
    p.send_signal(signal.SIGTERM)
    p.wait(60)


class LogTail:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.pos = path.stat().st_size if path.exists() else 0

    def wait_job_started(self, job: str, timeout: float = 20) -> datetime:
        deadline = time.time() + timeout
        buf = b""
        while time.time() < deadline:
            if self.path.exists():
                with open(self.path, "rb") as fh:
                    fh.seek(self.pos)
                    data = fh.read()
                self.pos += len(data)
                buf += data
                for line in buf.split(b"\n")[:-1]:
                    rec = json.loads(line)
                    if rec.get("event") == "job.started" and rec.get("job") == job:
                        return datetime.fromisoformat(rec["ts"].replace("Z", "+00:00"))
                buf = buf.split(b"\n")[-1]
            time.sleep(0.005)
        raise SystemExit(f"no {job} job.started within {timeout}s")


def latency(work: Path, appends: int, polling: bool) -> dict:
    home = work / ("poll" if polling else "events")
    t = home / "projects" / "-bench" / "s1.jsonl"
    t.parent.mkdir(parents=True)
    t.write_text("")
    settings = {"memd": {"provider": "offline", "forcePolling": polling, "pollSeconds": 1}}
    (home / "settings.json").write_text(json.dumps(settings))
    p = start_daemon(home, _env())
    time.sleep(1.0)
    tail = LogTail(home / "memd" / "logs" / "memd.jsonl")
    lat = []
    try:
        for i in range(appends):
            rec = {"type": "user", "uuid": f"u{i}", "timestamp": "2026-11-30T00:00:00Z",
                   "message": {"role": "user", "content": f"question number {i}: what does this do?"}}  # fmt: skip
            with open(t, "a") as fh:
                fh.write(json.dumps(rec) + "\n")
                fh.flush()
                wrote = datetime.now().astimezone()
            started = tail.wait_job_started("extract")
            lat.append((started - wrote).total_seconds())
            time.sleep(0.02)
    finally:
        _stop(p)
    return {"mode": "polling (pollSeconds=1)" if polling else "file events", "appends": len(lat),
            "p50_s": pct(lat, 0.5), "p95_s": pct(lat, 0.95), "max_s": max(lat)}  # fmt: skip


def idle(work: Path, seconds: int) -> dict:
    home = work / "idle"
    # Sessions with nothing due (no human turn, under the summary threshold): an idle home.
    rec = json.dumps({"type": "assistant", "uuid": "a", "timestamp": "2026-01-01T00:00:00Z",
                      "message": {"id": "m", "role": "assistant", "content": [{"type": "text", "text": "done"}]}}) + "\n"  # fmt: skip
    for i in range(10_000):
        d = home / "projects" / f"-p{i // 100:03d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"s{i:05d}.jsonl").write_text(rec)
    (home / "settings.json").write_text(json.dumps({"memd": {"provider": "offline"}}))
    p = start_daemon(home, _env())
    proc = psutil.Process(p.pid)
    time.sleep(20)  # the first scan and the initial jobs
    c0 = proc.cpu_times()
    t0 = time.time()
    rss = []
    while time.time() - t0 < seconds:
        rss.append(proc.memory_info().rss)
        time.sleep(1)
    c1 = proc.cpu_times()
    elapsed = time.time() - t0
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    status_walls = [timed([*MEMD, "--home", str(home), "status", "--json"])[0] * 1000 for _ in range(7)]
    _stop(p)
    return {"sessions": 10_000, "seconds": round(elapsed, 1), "cpu_percent_of_one_core": 100 * cpu / elapsed,
            "rss_MB_max": max(rss) / 2**20, "status_ms_median": pct(status_walls, 0.5),
            "status_ms_max": max(status_walls)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--appends", type=int, default=200)
    ap.add_argument("--idle-seconds", type=int, default=60)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="memd-bench-daemon-"))
    try:
        out = {"events": latency(work, args.appends, False), "polling": latency(work, args.appends, True),
               "idle": idle(work, args.idle_seconds)}  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
