"""Issue 3 benchmarks: append → job start latency (file events and polling), idle daemon
CPU and RSS over 10,000 sessions, and `memd status` wall time.

    .venv/bin/python bench/bench_daemon.py [--appends 200] [--idle-seconds 60]

Issue 27 point 2 (an append is seen at once), this tree ("after") against reference trees (`--before`,
default the commit where this branch left main; `--ref NAME=REV` for more), measured in the same run
on one home of 10,000 sessions, the daemons taking turns:

    .venv/bin/python bench/bench_daemon.py --issue27 [--appends 50] [--rounds 3] [--before REV] [--ref NAME=REV]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil

from bench.common import MEMD, REPO, pct, start_daemon, timed


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}


def _stop(p: subprocess.Popen[bytes]) -> None:
    p.send_signal(signal.SIGTERM)
    p.wait(60)


class LogTail:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.pos = path.stat().st_size if path.exists() else 0

    def wait_event(self, event: str, timeout: float = 20, **fields: str) -> datetime:
        """The time stamp of the next record of `event` with `fields`. The stamp is the daemon's own
        (taken as it logged the event), so how often this polls biases nothing but its own CPU."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            with open(self.path, "rb") as fh:
                fh.seek(self.pos)
                data = fh.read()
            start = 0
            while (end := data.find(b"\n", start)) >= 0:
                rec = json.loads(data[start:end])
                start = end + 1
                if rec.get("event") == event and all(rec.get(k) == v for k, v in fields.items()):
                    self.pos += start
                    return datetime.fromisoformat(rec["ts"].replace("Z", "+00:00"))
            self.pos += start
            time.sleep(0.002)
        raise SystemExit(f"no {event} {fields} within {timeout}s")

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



# -- issue 27 point 2: an append is seen at once ------------------------------------------------

QUIET_REC = json.dumps({"type": "assistant", "uuid": "a", "timestamp": "2026-01-01T00:00:00Z",
                        "message": {"id": "m", "role": "assistant", "content": [{"type": "text", "text": "done"}]}}) + "\n"  # fmt: skip


def _quiet_home(home: Path, sessions: int) -> None:
    """`sessions` sessions with nothing due (no human turn, under the summary threshold), 100 a project."""
    for i in range(sessions):
        d = home / "projects" / f"-p{i // 100:03d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"s{i:05d}.jsonl").write_text(QUIET_REC)


def _reference_tree(work: Path, name: str, rev: str) -> Path:
    """`memd/` as it is at `rev`, unpacked beside the bench: a reference daemon runs it by PYTHONPATH
    (ahead of this tree's editable install), with the same interpreter and dependencies."""
    out = work / f"src-{name}"
    out.mkdir()
    arch = subprocess.run(["git", "-C", str(REPO), "archive", rev, "memd"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(out)], input=arch.stdout, check=True)
    return out


def _settle(proc: psutil.Process, timeout: float = 600) -> None:
    """Wait until the daemon's start-up work (first scan, initial jobs) is over: under 2 % of a core for 1 s."""
    deadline = time.time() + timeout
    last = sum(proc.cpu_times()[:2])
    while time.time() < deadline:
        time.sleep(1.0)
        now = sum(proc.cpu_times()[:2])
        if now - last < 0.02:
            return
        last = now
    raise SystemExit("the daemon did not settle")


def _append(path: Path, data: bytes) -> float:
    """One append as an agent makes it (open, write, close); the wall time just after the write."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, data)
        wrote = time.time()
    finally:
        os.close(fd)
    return wrote


def _lone_appends(home: Path, tail: LogTail, n: int, gap: float, rng: random.Random, start: int) -> list[float]:
    """`n` human turns, each after a quiet moment of `gap`..2×`gap` s: ms from the write to the
    daemon's `ledger.ingested` record (logged after the ledger's commit)."""
    t = home / "projects" / "-bench" / "s1.jsonl"
    out = []
    for i in range(start, start + n):
        time.sleep(gap * (1 + rng.random()))
        rec = {"type": "user", "uuid": f"u{i}", "timestamp": "2026-11-30T00:00:00Z",
               "message": {"role": "user", "content": f"question number {i}: what does this do?"}}  # fmt: skip
        wrote = _append(t, (json.dumps(rec) + "\n").encode())
        seen = tail.wait_event("ledger.ingested", session="s1")
        out.append((seen.timestamp() - wrote) * 1000)
    return out


def _ledger_offset(home: Path, name: str) -> int:
    conn = sqlite3.connect(f"file:{home / 'memd' / 'state.sqlite'}?mode=ro", uri=True, timeout=5)
    try:
        row = conn.execute("SELECT offset FROM files WHERE path LIKE ?", (f"%/{name}",)).fetchone()
    finally:
        conn.close()
    return int(row[0]) if row else -1


def _burst(home: Path, proc: psutil.Process, tail: LogTail, name: str, lines: int, per_second: float) -> dict:
    """`lines` assistant records of ~1 KB appended to a new session at `per_second` (0: as fast as
    the writer goes): the daemon's CPU seconds per MB from the first write until the ledger holds the
    last byte, and how many times it read the file."""
    path = home / "projects" / "-bench" / name
    path.write_bytes(QUIET_REC.encode())
    sid = name.removesuffix(".jsonl")
    tail.wait_event("ledger.ingested", timeout=60, session=sid)
    _settle(proc)
    text = "x" * 900
    recs = [json.dumps({"type": "assistant", "uuid": f"{sid}-{i}", "timestamp": "2026-11-30T00:00:00Z",
                        "message": {"id": f"m{i}", "role": "assistant", "content": [{"type": "text", "text": text}]}}).encode() + b"\n"
            for i in range(lines)]  # fmt: skip
    size = path.stat().st_size + sum(map(len, recs))
    c0 = sum(proc.cpu_times()[:2])
    t0 = time.perf_counter()
    for i, r in enumerate(recs):
        _append(path, r)
        if per_second:
            ahead = t0 + (i + 1) / per_second - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)
    while _ledger_offset(home, name) < size:
        time.sleep(0.02)
    cpu = sum(proc.cpu_times()[:2]) - c0
    wall = time.perf_counter() - t0
    time.sleep(0.5)  # the last read's log record follows its commit
    reads = 0
    with open(tail.path, "rb") as fh:
        fh.seek(tail.pos)
        for line in fh:
            rec = json.loads(line)
            reads += rec.get("event") == "ledger.ingested" and rec.get("session") == sid
    mb = (size - len(QUIET_REC)) / 1e6
    return {"MB": mb, "cpu_s": cpu, "cpu_s_per_MB": cpu / mb, "reads": reads, "wall_s": wall}


def issue27(work: Path, appends: int, sessions: int, rounds: int, refs: dict[str, str], gap: float) -> dict:
    """The reference trees (`refs`: name → revision, "before" among them) and this tree ("after"),
    taking turns on one home of `sessions` sessions: lone-append latency to the ledger and a burst's
    CPU per MB."""
    home = work / "i27"
    _quiet_home(home, sessions)
    (home / "projects" / "-bench").mkdir(parents=True)
    (home / "projects" / "-bench" / "s1.jsonl").write_text("")
    settings = {"memd": {"provider": "offline", "logLevel": "debug"},
                "memory": {"sessionMemory": {"enabled": False}}}  # fmt: skip  (a burst's summaries are not its ingest)
    (home / "settings.json").write_text(json.dumps(settings))
    envs = {name: {**_env(), "PYTHONPATH": str(_reference_tree(work, name, rev))} for name, rev in refs.items()}
    envs["after"] = _env()
    rng = random.Random(27)
    res: dict[str, dict[str, list]] = {v: {"lat": [], "paced": [], "flat_out": []} for v in envs}
    per_round = -(-appends // rounds)
    done = dict.fromkeys(envs, 0)
    names = list(envs)
    load0 = os.getloadavg()[0]
    for r in range(rounds):
        for v in names[r % len(names):] + names[: r % len(names)]:  # each round starts with the next one
            p = start_daemon(home, envs[v])
            proc = psutil.Process(p.pid)
            try:
                _settle(proc)
                tail = LogTail(home / "memd" / "logs" / "memd.jsonl")
                n = min(per_round, appends - done[v])
                res[v]["lat"] += _lone_appends(home, tail, n, gap, rng, start=sum(len(x["lat"]) for x in res.values()))
                done[v] += n
                res[v]["paced"].append(_burst(home, proc, tail, f"burst-{v}-{r}-paced.jsonl", 2000, 1000))
                res[v]["flat_out"].append(_burst(home, proc, tail, f"burst-{v}-{r}-flat.jsonl", 10_000, 0))
            finally:
                _stop(p)
    out: dict = {"refs": refs, "sessions_watched": sessions + 1, "rounds": rounds,
                 "load_1min_start_end": [load0, os.getloadavg()[0]]}  # fmt: skip
    for v, d in res.items():
        lat = d["lat"]
        out[v] = {"appends": len(lat), "p50_ms": pct(lat, 0.5), "p95_ms": pct(lat, 0.95), "max_ms": max(lat),
                  "latencies_ms": sorted(round(x, 2) for x in lat)}  # fmt: skip
        for kind in ("paced", "flat_out"):
            bs = d[kind]
            mb = sum(b["MB"] for b in bs)
            out[v][kind] = {"MB": mb, "cpu_s_per_MB": sum(b["cpu_s"] for b in bs) / mb,
                            "reads": sum(b["reads"] for b in bs), "runs": bs}  # fmt: skip
    for v in names:
        if v != "before":
            out[f"{v}_over_before"] = {
                "p50": out[v]["p50_ms"] / out["before"]["p50_ms"],
                "p95": out[v]["p95_ms"] / out["before"]["p95_ms"],
                **{f"cpu_per_MB_{k}": out[v][k]["cpu_s_per_MB"] / out["before"][k]["cpu_s_per_MB"] for k in ("paced", "flat_out")},
            }  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--appends", type=int, default=200)
    ap.add_argument("--idle-seconds", type=int, default=60)
    ap.add_argument("--issue27", action="store_true", help="issue 27 point 2: this tree against --before")
    ap.add_argument("--before", default="", help="reference revision (default: merge-base of HEAD and main)")
    ap.add_argument("--ref", action="append", default=[], metavar="NAME=REV", help="a further reference tree")
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--gap", type=float, default=0.15, help="quiet seconds before each lone append (up to 2×)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="memd-bench-daemon-"))
    if args.issue27:
        rev = args.before or subprocess.run(["git", "-C", str(REPO), "merge-base", "HEAD", "main"],
                                            capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        try:
            refs = {"before": rev, **dict(r.split("=", 1) for r in args.ref)}
            print(json.dumps(issue27(work, args.appends, args.sessions, args.rounds, refs, args.gap), indent=2))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return
    try:
        out = {"events": latency(work, args.appends, False), "polling": latency(work, args.appends, True),
               "idle": idle(work, args.idle_seconds)}  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
