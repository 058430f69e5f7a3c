"""Issue 15 benchmarks: git-backed memory and `memd sync` with 1,000 memories.

    .venv/bin/python bench/bench_sync.py [--memories 1000] [--idle-seconds 60]

- commit: the first commit of a home of N memories, and one memd write (one commit) in it;
- sync: `memd sync` (a real process, wall time, and memd's own duration) between two homes and a
  bare remote on local disk: the first push of N memories, the first pull of them into an empty
  home, one changed memory each way, and a sync with nothing to do;
- idle: the daemon's CPU and RSS over a minute on a home of N memories with sync on
  (`everyMinutes: 1`, so one periodic sync falls in the window), beside the same home with git off.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from memd.fsutil import atomic_write
from memd.git.repo import Repo
from memd.history.writes import Recorder
from memd.logs.events import cli_defaults
from memd.memory.file import render_memory
from memd.settings import load
from memd.tree import Home, Place

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil

from bench.common import MEMD, start_daemon

GIT_ENV = {"GIT_AUTHOR_NAME": "Bench", "GIT_AUTHOR_EMAIL": "bench@example.invalid", "GIT_COMMITTER_NAME": "Bench",
           "GIT_COMMITTER_EMAIL": "bench@example.invalid", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}  # fmt: skip


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "GIT_"))}
    env.update(GIT_ENV)
    env.update(extra)
    return env


def _memory(i: int) -> str:
    body = (f"Decision {i}: the service keeps its queue in Postgres, not Redis, because the team "
            "already runs Postgres and the queue is small. **Why:** one less system to operate. "
            "**How to apply:** new background work goes through the jobs table.")  # fmt: skip
    return render_memory(f"decision-{i:04d}", f"decision number {i} about the job queue", "project", body,
                         {"source": "memd", "updated": "2026-01-01T00:00:00Z"})  # fmt: skip


def _home(root: Path, n: int, settings: dict) -> Path:
    """n memories: a fifth in the drawer, the rest over eight projects."""
    (root / "projects").mkdir(parents=True)
    (root / "settings.json").write_text(json.dumps(settings))
    for i in range(n):
        d = root / "memory" if i % 5 == 0 else root / "projects" / f"-bench-p{i % 8}" / "memory"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"decision-{i:04d}.md").write_text(_memory(i))
    return root


def _memd(home: Path, *args: str, host: str = "bench") -> tuple[float, dict]:
    t0 = time.perf_counter()
    p = subprocess.run([*MEMD, "--home", str(home), *args], capture_output=True, text=True, env=_env(MEMD_HOST=host),
                       check=False)  # fmt: skip
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"memd {' '.join(args)}: {p.stderr}")
    return wall, (json.loads(p.stdout) if "--json" in args else {})


def commits(work: Path, n: int) -> dict:
    """In-process, as the hooks run: the first commit, then single writes."""
    os.environ.update(GIT_ENV)

    cli_defaults()  # warnings to stderr; stdout is the result

    home = Home(_home(work / "commit", n, {"memd": {"git": True}}))
    s = load(home.settings_file)
    t0 = time.perf_counter()
    with Repo(home).locked(10) as repo:
        repo.ensure_initial(s)
    first = time.perf_counter() - t0
    writes = []
    for k in range(20):
        place = Place.project("-bench-p1")
        path = place.memory_dir(home) / "decision-0001.md"
        t0 = time.perf_counter()
        rec = Recorder(home, place, "bench", f"write {k}", datetime.now(UTC))
        rec.before(path)
        atomic_write(path, _memory(1) + f"\nrevision {k}\n")
        rec.commit()  # → memd.git.commits.after_write: one commit
        writes.append(time.perf_counter() - t0)
    writes_plain = []
    home.settings_file.write_text(json.dumps({"memd": {"git": False}}))
    for k in range(20):  # the same write path with git off, for the difference
        place = Place.project("-bench-p2")
        path = place.memory_dir(home) / "decision-0002.md"
        t0 = time.perf_counter()
        rec = Recorder(home, place, "bench", f"write {k}", datetime.now(UTC))
        rec.before(path)
        atomic_write(path, _memory(2) + f"\nrevision {k}\n")
        rec.commit()
        writes_plain.append(time.perf_counter() - t0)
    home.settings_file.write_text(json.dumps({"memd": {"git": True}}))
    with Repo(home).locked(10) as repo:  # takes in the writes made with git off
        repo.commit(repo.local_places(), subject="catch up", trailers={}, materialize=True, settings=s)
    scans = []
    for _ in range(5):  # a whole-home scan with nothing to commit (what each sync does first)
        t0 = time.perf_counter()
        with Repo(home).locked(10) as repo:
            got = repo.commit(repo.local_places(), subject="noop", trailers={}, materialize=True, settings=s)
        scans.append(time.perf_counter() - t0)
        assert got.sha is None
    scan = statistics.median(scans)
    return {"memories": n, "first_commit_s": round(first, 3),
            "one_write_with_git_ms_median": round(1000 * statistics.median(writes), 1),
            "one_write_without_git_ms_median": round(1000 * statistics.median(writes_plain), 1),
            "full_scan_nothing_new_ms": round(1000 * scan, 1)}  # fmt: skip


def syncs(work: Path, n: int) -> dict:
    remote = work / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True, env=_env())
    settings = {"memd": {"provider": "offline", "git": True, "sync": {"remote": str(remote)}}}
    a = _home(work / "a", n, settings)
    b = work / "b"
    (b / "projects").mkdir(parents=True)
    (b / "settings.json").write_text(json.dumps(settings))
    for i in range(8):  # B has the same projects (same paths, no remote: matched by key), so all N land
        (b / "projects" / f"-bench-p{i}").mkdir()
    out: dict = {"memories": n}
    wall, r = _memd(a, "sync", "--json", host="laptop")
    out["first_push"] = {"wall_s": round(wall, 2), "sync_ms": r["duration_ms"]}
    wall, r = _memd(b, "sync", "--json", host="desk")
    out["first_pull_into_empty_home"] = {"wall_s": round(wall, 2), "sync_ms": r["duration_ms"],
                                         "files_written": sum(len(v) for v in r["applied"].values())}  # fmt: skip
    p = a / "memory" / "decision-0000.md"
    p.write_text(p.read_text() + "\nchanged on the laptop\n")
    wall, r = _memd(a, "sync", "--json", host="laptop")
    out["one_change_push"] = {"wall_s": round(wall, 2), "sync_ms": r["duration_ms"]}
    wall, r = _memd(b, "sync", "--json", host="desk")
    out["one_change_pull"] = {"wall_s": round(wall, 2), "sync_ms": r["duration_ms"],
                              "files_written": sum(len(v) for v in r["applied"].values())}  # fmt: skip
    walls, durs = [], []
    for _ in range(5):
        wall, r = _memd(a, "sync", "--json", host="laptop")
        walls.append(wall)
        durs.append(r["duration_ms"])
    out["nothing_to_do"] = {"wall_s_median": round(statistics.median(walls), 2), "sync_ms_median": statistics.median(durs)}
    out["repository_MB"] = round(sum(f.stat().st_size for f in (a / "memd" / "git").rglob("*") if f.is_file()) / 2**20, 2)
    return out


def idle(work: Path, n: int, seconds: int, sync_on: bool) -> dict:
    remote = work / f"idle-remote-{sync_on}.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True, env=_env())
    memd = {"provider": "offline", "git": sync_on, "sync": {"remote": str(remote), "everyMinutes": 1}}
    home = _home(work / f"idle-{'sync' if sync_on else 'plain'}", n, {"memd": memd})
    p = start_daemon(home, _env(MEMD_HOST="idle"))
    proc = psutil.Process(p.pid)

    def cpu() -> float:
        t = proc.cpu_times()
        own = t.user + t.system
        for c in proc.children(recursive=True):  # git processes of a sync in the window
            try:
                ct = c.cpu_times()
                own += ct.user + ct.system
            except psutil.Error:
                pass
        return own + t.children_user + t.children_system

    time.sleep(20)  # start-up: the first scan, the first index runs, the first commit and sync
    c0, t0 = cpu(), time.time()
    rss = []
    while time.time() - t0 < seconds:
        rss.append(proc.memory_info().rss)
        time.sleep(1)
    c1, elapsed = cpu(), time.time() - t0
    p.send_signal(signal.SIGTERM)
    p.wait(60)
    syncs_done = sum('"sync.finished"' in line for line in (home / "memd" / "logs" / "memd.jsonl").read_text().splitlines())
    return {"sync": sync_on, "memories": n, "seconds": round(elapsed, 1),
            "cpu_percent_of_one_core": round(100 * (c1 - c0) / elapsed, 2), "rss_MB_max": round(max(rss) / 2**20, 1),
            "syncs_logged_since_start": syncs_done}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--memories", type=int, default=1000)
    ap.add_argument("--idle-seconds", type=int, default=60)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="memd-bench-sync-"))
    try:
        out = {"git": subprocess.run(["git", "--version"], capture_output=True, text=True, check=True).stdout.strip(),
               "commit": commits(work, args.memories), "sync": syncs(work, args.memories),
               "idle_sync_on": idle(work, args.memories, args.idle_seconds, True),
               "idle_git_off": idle(work, args.memories, args.idle_seconds, False)}  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
