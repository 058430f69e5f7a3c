"""The recall hook with and without the daemon's nearest-memories socket (`memd[semantic]`, issue 25 point 3).

    .venv/bin/pip install -e '.[semantic]'
    .venv/bin/python bench/bench_semantic_hook.py [--runs 20] [--memories 200]

Three homes built alike (the `--memories` facts of bench_recall_budget.py plus `deploy-fridays`), offline
provider. One has a running daemon that embedded every memory and serves `<home>/memd/nearest.sock`; one has
no daemon (no socket: today's path); one has a hung peer at the socket's place (accepts, never answers).
Cases alternate run by run with `python3 -c pass` (the floor), so a busy machine slows each alike: the
wall time of one `memd recall --hook` process, start to exit, and whether the answer held the memory.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import MEMD, compile_memd, pct, start_daemon
from memd.index.nearest import socket_path
from memd.index.refresh import refresh_all
from memd.keys import cwd_key, project_key
from memd.logs.events import cli_defaults
from memd.memory.file import render_memory, write_memory
from memd.tree import Home

# No word of deploy-fridays; "release" finds release-notes, so recall has a keyword answer the dense ranking joins.
PROMPT = "which day of the week do we ship a release?"


def world(root: Path, n: int) -> tuple[Home, Path]:
    home = Home(root / "claude")
    proj = root / "shop"
    (proj / ".git").mkdir(parents=True)
    key = project_key(proj)
    for i in range(n):
        name = f"fact-{i}"
        write_memory(home.project_memory(key), name, render_memory(name, f"fact number {i} about topic{i % 17}",
                                                                   "project", f"Body {i}."))  # fmt: skip
    write_memory(home.project_memory(key), "deploy-fridays", render_memory(
        "deploy-fridays", "deploys happen only on Fridays", "project", "Run make deploy on Fridays."))
    write_memory(home.project_memory(key), "release-notes", render_memory(
        "release-notes", "where release notes go", "project", "Each release gets a section in CHANGELOG.md."))
    refresh_all(home)
    return home, proj


def run_hook(home: Home, proj: Path, env: dict[str, str]) -> tuple[float, bool]:
    sid = str(uuid.uuid4())
    ev = {"session_id": sid, "transcript_path": str(home.projects / cwd_key(proj) / f"{sid}.jsonl"),
          "cwd": str(proj), "hook_event_name": "UserPromptSubmit", "prompt": PROMPT}  # fmt: skip
    t0 = time.monotonic()
    r = subprocess.run([*MEMD, "--home", str(home.root), "recall", "--hook"], input=json.dumps(ev).encode(),
                       capture_output=True, env=env, timeout=60)  # fmt: skip
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-500:]
    return wall, b"deploy-fridays" in r.stdout


def hung_peer(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen(64)
    held: list[socket.socket] = []
    threading.Thread(target=lambda: [held.append(sock.accept()[0]) for _ in iter(int, 1)], daemon=True).start()
    return sock


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--memories", type=int, default=200)
    args = ap.parse_args()
    cli_defaults()
    compile_memd()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    with tempfile.TemporaryDirectory() as tmp:
        homes = {label: world(Path(tmp) / label.split()[0], args.memories)
                 for label in ("serving daemon", "no socket", "hung peer")}  # fmt: skip
        served = homes["serving daemon"][0]
        t0 = time.monotonic()
        daemon = start_daemon(served.root, env)
        try:
            while not socket_path(served.memd_dir).exists() or _vectors(served) < args.memories + 2:
                if daemon.poll() is not None or time.monotonic() - t0 > 1800:
                    raise SystemExit("the daemon did not embed the memories")
                time.sleep(0.2)
            print(f"daemon: {args.memories + 2} memories embedded and the socket up in {time.monotonic() - t0:.1f} s")
            peer = hung_peer(socket_path(homes["hung peer"][0].memd_dir))
            times: dict[str, list[float]] = {"python3 -c pass": [], **{k: [] for k in homes}}
            found: dict[str, int] = dict.fromkeys(homes, 0)
            for _ in range(args.runs):
                t = time.monotonic()
                subprocess.run([sys.executable, "-c", "pass"], check=True)
                times["python3 -c pass"].append(time.monotonic() - t)
                for label, (home, proj) in homes.items():
                    wall, hit = run_hook(home, proj, env)
                    times[label].append(wall)
                    found[label] += hit
            peer.close()
        finally:
            daemon.terminate()
            daemon.wait(120)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    print("| case | runs | p50 ms | p95 ms | max ms | answer held the paraphrased memory |\n|---|---:|---:|---:|---:|---:|")
    for label, ts in times.items():
        hits = f"{found[label]}/{len(ts)}" if label in found else "—"
        print(f"| {label} | {len(ts)} | {pct(ts, 0.5) * 1000:.0f} | {pct(ts, 0.95) * 1000:.0f} | {max(ts) * 1000:.0f} "
              f"| {hits} |")  # fmt: skip
    return 0


def _vectors(home: Home) -> int:
    try:
        conn = sqlite3.connect(f"file:{home.search_db}?mode=ro", uri=True)
        try:
            return int(conn.execute("SELECT count(*) FROM embeddings").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
