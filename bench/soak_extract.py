"""Soak: concurrent sessions, a failing model API, `kill -9` of the daemon; statement → memory on disk.

    .venv/bin/python bench/soak_extract.py [--minutes 6] [--writers 6] [--kill-every 90] [--no-write]

Issue 21 point 4 ("a slow model delays no one else"). Several writer threads append statements to
Claude Code transcripts (one human turn and an answer each, a new session every 10 statements, over
three projects) while `memd run` (a real process, provider `anthropic`, the real client) extracts
them against the loopback fake Messages API (tests/fakeapi.py, in this process). About 35 % of the
API's answers are faults: 429 with retry-after, 529, 500, a hang past the call's deadline, a trickle
(one byte a second, past the deadline), a cut answer (malformed JSON). The daemon is killed with
SIGKILL every `--kill-every` seconds and started again at once. After the writers stop, the faults
stop and the daemon drains (at most 180 s).

The fake model answers the gate "yes" and extraction with one `add` per statement id found in the new
conversation (`fact-<id>`), as a good model would. A monitor thread polls the memory directories
every 0.25 s and records when each statement's memory first appears. Figures: statements written,
memories written, lost (no memory at the end), duplicated (more than one memory for a statement),
and statement → memory latency p50 / p95 (from the append to the memory on disk), for the statements
written while faults and kills were on.

The machine is shared and noisy (2 cores, 8 engineers): the run is bounded in time, and its figures
are what this machine gave, said as such.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, pct, start_daemon, write_section
from tests.fakeapi import (
    FakeAnthropic,
    Reply,
    delay,
    drip,
    malformed,
    request_system_text,
    request_user_text,
    status,
    text,
)
from tests.jobkit import write_session

SECTION_TITLE = "## Soak: statement → memory with a failing model and kill -9 (issue 21)"
PROJECTS = ["-work-soak-alpha", "-work-soak-beta", "-work-soak-gamma"]
ID = re.compile(r"\bfact (w\d+n\d+)\b")
TIMEOUT_S = 8  # the daemon's per-call deadline (memd.timeoutSeconds)


class FaultyModel:
    """The fake API's responder: ~35 % faults while `on`, else a good model's answer."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.on = True
        self.mu = threading.Lock()
        self.counts: dict[str, int] = {}

    def __call__(self, body: dict[str, Any]) -> Reply | None:
        with self.mu:
            roll = self.rng.random() if self.on else 1.0
        kind = ("429" if roll < 0.10 else "529" if roll < 0.17 else "500" if roll < 0.24 else "hang" if roll < 0.28
                else "trickle" if roll < 0.31 else "cut" if roll < 0.35 else "ok")  # fmt: skip
        with self.mu:
            self.counts[kind] = self.counts.get(kind, 0) + 1
        good = self._answer(body)
        return {
            "429": lambda: status(429, retry_after=2),
            "529": lambda: status(529),
            "500": lambda: status(500),
            "hang": lambda: delay(TIMEOUT_S * 3, good),
            "trickle": lambda: drip(1.0, good),
            "cut": malformed,
            "ok": lambda: good,
        }[kind]()

    @staticmethod
    def _answer(body: dict[str, Any]) -> Reply:
        if "memory gate" in request_system_text(body):
            return text("yes")
        user = request_user_text(body)
        convo = user[user.find("## New conversation"):] if "## New conversation" in user else user
        ids = sorted(set(ID.findall(convo)))
        ops = [{"op": "add", "scope": "project", "name": f"fact-{i}", "description": f"fact {i} of the soak",
                "type": "project", "body": f"The soak's fact {i}.\n\n**Why:** said in a session."} for i in ids]  # fmt: skip
        return text(json.dumps({"operations": ops}))


class Monitor(threading.Thread):
    """First time each fact's memory file is seen on disk, and how many files each fact has."""

    def __init__(self, home: Path) -> None:
        super().__init__(daemon=True)
        self.home = home
        self.seen: dict[str, float] = {}
        self.stop = threading.Event()

    def files(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for key in PROJECTS:
            d = self.home / "projects" / key / "memory"
            if d.is_dir():
                for p in d.glob("fact-*.md"):
                    m = re.match(r"fact-(w\d+n\d+)", p.stem)
                    if m:
                        out[m.group(1)] = out.get(m.group(1), 0) + 1
        return out

    def run(self) -> None:
        while not self.stop.is_set():
            now = time.monotonic()
            for fid in self.files():
                self.seen.setdefault(fid, now)
            time.sleep(0.25)


def writer(home: Path, w: int, until: float, written: dict[str, float], mu: threading.Lock, seed: int) -> None:
    rng = random.Random(seed)
    n = 0
    while time.monotonic() < until:
        key = PROJECTS[(w + n // 10) % len(PROJECTS)]
        path = home / "projects" / key / f"soak-w{w}-{n // 10:03d}.jsonl"
        fid = f"w{w}n{n:04d}"
        with mu:
            written[fid] = time.monotonic()
        write_session(path, [("user", f"Remember that fact {fid} holds for the {key[11:]} service from now on."),
                             ("assistant", "Noted.")], start=2 * (n % 10))  # fmt: skip
        n += 1
        time.sleep(rng.uniform(4.0, 8.0))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=6.0, help="how long the writers write (faults and kills on)")
    ap.add_argument("--writers", type=int, default=6)
    ap.add_argument("--kill-every", type=float, default=90.0, help="seconds between two kill -9 of the daemon")
    ap.add_argument("--drain", type=float, default=180.0, help="at most this long for the rest after the writers stop")
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--no-write", action="store_true", help="do not update bench/RESULTS.md")
    ap.add_argument("--label", default="this tree", help="what the row is called (e.g. the revision measured)")
    args = ap.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="memd-soak-"))
    home = tmp / "home"
    home.mkdir()
    model = FaultyModel(args.seed)
    written: dict[str, float] = {}
    mu = threading.Lock()
    kills = 0
    with FakeAnthropic(responder=model) as api:
        (home / "settings.json").write_text(json.dumps({
            "memory": {"sessionMemory": {"enabled": False}, "extractEveryTurns": 1},
            "memd": {"provider": "anthropic", "baseUrl": api.base_url, "timeoutSeconds": TIMEOUT_S, "maxRetries": 2,
                     "retrySeconds": 5},
        }))  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")} | {"ANTHROPIC_API_KEY": "soak"}
        mon = Monitor(home)
        mon.start()
        daemon = start_daemon(home, env)
        until = time.monotonic() + args.minutes * 60
        threads = [threading.Thread(target=writer, args=(home, w, until, written, mu, args.seed + w), daemon=True)
                   for w in range(args.writers)]  # fmt: skip
        for t in threads:
            t.start()
        next_kill = time.monotonic() + args.kill_every
        while any(t.is_alive() for t in threads):
            time.sleep(0.5)
            if time.monotonic() >= next_kill:
                daemon.send_signal(signal.SIGKILL)
                daemon.wait(30)
                kills += 1
                (home / "memd" / "daemon.json").unlink(missing_ok=True)
                daemon = start_daemon(home, env)
                next_kill = time.monotonic() + args.kill_every
        with model.mu:
            model.on = False
        faulty = dict(written)
        drain_until = time.monotonic() + args.drain
        while time.monotonic() < drain_until and set(written) - set(mon.seen):
            time.sleep(1)
        mon.stop.set()
        mon.join(5)
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(150)
        except subprocess.TimeoutExpired:
            daemon.kill()
        files = mon.files()
    lost = sorted(set(written) - set(files))
    dup = sorted(f for f, c in files.items() if c > 1)
    lat = [mon.seen[f] - t for f, t in faulty.items() if f in mon.seen]
    faults = sum(v for k, v in model.counts.items() if k != "ok")
    calls = sum(model.counts.values())
    row = (f"| {args.label} | {len(written)} | {len(files)} | {len(lost)} | {len(dup)} | {pct(lat, 0.5) if lat else 0:.1f} s | {pct(lat, 0.95) if lat else 0:.1f} s | "
           f"{max(lat) if lat else 0:.1f} s | {kills} | {calls} ({faults / max(1, calls):.0%} faults: "
           f"{', '.join(f'{k} {v}' for k, v in sorted(model.counts.items()))}) |")  # fmt: skip
    cmd = (f".venv/bin/python bench/soak_extract.py --minutes {args.minutes:g} --writers {args.writers} "
           f"--kill-every {args.kill_every:g}")  # fmt: skip
    out = "\n".join([
        SECTION_TITLE, "",
        f"Command: `{cmd}`", "",
        f"{args.writers} writers append statements to Claude Code transcripts (a new session every 10, three "
        f"projects) for {args.minutes:g} min while `memd run` (provider `anthropic`, the real client, "
        f"`timeoutSeconds: {TIMEOUT_S}`, `maxRetries: 2`) extracts them against the loopback fake API, which "
        "answers ~35 % of calls with a fault (429 with retry-after 2 s, 529, 500, a hang past the deadline, a "
        "one-byte-a-second trickle, a cut answer); the daemon is killed with SIGKILL every "
        f"{args.kill_every:g} s and restarted. Then the faults stop and the rest drains (≤ {args.drain:g} s). "
        "Latency: from the append to the memory file on disk (polled every 0.25 s), for the statements written "
        "while faults and kills were on. Measured on this shared 2-core machine under the other engineers' "
        "load: absolute times are this machine's, not a reference's.", "",
        "| daemon | statements | memories | lost | duplicated | p50 | p95 | max | kill -9 | model calls |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        row,
    ])  # fmt: skip
    print(out)
    if lost:
        print("lost:", " ".join(lost[:40]))
    if not args.no_write:
        write_section(SECTION_TITLE, out, REPO / "bench" / "RESULTS.md")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0 if not lost and not dup else 1


if __name__ == "__main__":
    raise SystemExit(main())
