"""`memd mcp` start-up against a bare interpreter (issue 22 point 6).

Claude Code's print mode waits about 2 s for an MCP server (SPEC §11.1): the time that matters is
from spawning `memd mcp` to its answer to `tools/list` (after `initialize`). The floor is
`python3 -c pass` with the same interpreter, measured in the same run, interleaved, so a noisy
machine moves both. Reports p50 and p95 of each and the ratio of the p95s (goal: ≤ 4).

    python bench/bench_mcp_start.py [--runs 30] [--busy N]

`--busy N` keeps N busy-loop processes running (bounded: they stop with the bench) to measure on
a loaded machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}  # fmt: skip
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def memd_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("memd")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "memd"]


def bare() -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - t


SDK_SERVE = ("import sys\nfrom pathlib import Path\nfrom memd.agent.mcp import build\nfrom memd.tree import Home\n"
             "build(Home(Path(sys.argv[1])), 'k').run('stdio')\n")  # the SDK's own loop: how `memd mcp` served before


def mcp_start(home: Path, cwd: Path, sdk: bool = False) -> float:
    """Seconds from spawn to the `tools/list` answer."""
    cmd = [sys.executable, "-c", SDK_SERVE, str(home)] if sdk else [*memd_cmd(), "--home", str(home), "mcp"]
    t = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert p.stdin and p.stdout
    p.stdin.write("".join(json.dumps(m) + "\n" for m in (INIT, INITIALIZED, LIST)).encode())
    p.stdin.flush()
    first = json.loads(p.stdout.readline())
    second = json.loads(p.stdout.readline())
    took = time.perf_counter() - t
    p.stdin.close()
    p.kill()
    p.wait()
    assert first["result"]["serverInfo"]["name"] == "memd" and len(second["result"]["tools"]) == 6, (first, second)
    return took


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def busy(n: int, seconds: float) -> list[subprocess.Popen[bytes]]:
    loop = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass\n"
    return [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--busy", type=int, default=0, help="busy-loop processes during the runs")
    ap.add_argument("--sdk", action="store_true", help="also time the SDK's own stdio loop (the former `memd mcp`)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home, cwd = Path(tmp) / "home", Path(tmp) / "proj"
        home.mkdir()
        cwd.mkdir()
        hogs = busy(args.busy, 600) if args.busy else []
        try:
            floor, serve, sdk = [], [], []
            for _ in range(args.runs):
                floor.append(bare())
                serve.append(mcp_start(home, cwd))
                if args.sdk:
                    sdk.append(mcp_start(home, cwd, sdk=True))
        finally:
            for h in hogs:
                h.kill()
                h.wait()
    load = os.getloadavg()[0]
    print(f"runs {args.runs}, busy loops {args.busy}, load {load:.1f}")
    print(f"python3 -c pass     p50 {pct(floor, .5) * 1000:7.0f} ms   p95 {pct(floor, .95) * 1000:7.0f} ms")
    print(f"memd mcp tools/list p50 {pct(serve, .5) * 1000:7.0f} ms   p95 {pct(serve, .95) * 1000:7.0f} ms")
    print(f"ratio of p95s {pct(serve, .95) / pct(floor, .95):.1f}x   ratio of p50s {pct(serve, .5) / pct(floor, .5):.1f}x")
    if sdk:
        print(f"SDK's loop (before) p50 {pct(sdk, .5) * 1000:7.0f} ms   p95 {pct(sdk, .95) * 1000:7.0f} ms   "
              f"ratio of p95s {pct(sdk, .95) / pct(floor, .95):.1f}x")


if __name__ == "__main__":
    main()
