"""Special files, sizes, extremes (issue 16): each test failed on main before its fix.

* A FIFO (or a link to /dev/zero) where memd reads a file — MEMORY.md, memory.md,
  summary.md, settings.json, either database, the log — is refused in one line,
  never waited on; a daemon with one in place still finishes its jobs and stops on SIGTERM.
* memd's own directories (`memd/`, `memd/logs`, `memd/history`) are never followed
  through a symlink; the user's `memory/` and `projects/` may be, and `memd doctor` says where.
* Every setting has a range; settings.json has a size limit (a 10 MB file once cost every
  command 44-109 s).
* A damaged `search.sqlite` (six ways) is set aside and rebuilt, a half-made one is filled
  from every directory at once; a damaged `state.sqlite` is one line; a damaged history
  entry is listed, and a snapshot that no longer matches its checksums is not restored.
* Smaller: control sequences from a model are stripped (stored and printed), times are
  clamped to now, a killed index write's temporary files are swept, case variants of one
  name are one memory, a runaway answer is one summary line, expected failures are one
  line without a traceback and cost no model call.

Every command runs with a timeout: a hang fails the test, never the suite.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import jobs.extract as extract
import jobs.index as index_job
from jobs import dream
from jobs.dream.eligibility import due_decisions
from memd import settings as st
from memd.clock import iso
from memd.history import snapshots as swap
from memd.history import store
from memd.history.pack import PACK_FILE, Pack
from memd.index.schema import SCHEMA_VERSION
from memd.job.context import set_cursor
from memd.job.runner import run_job
from memd.memory.scan import scan_dir
from memd.tree import Home, Place
from tests.conftest import memd_cmd
from tests.fakeapi import FakeAnthropic, op, ops_reply, text
from tests.faults.kit import RecordingLog, one_line, snapshot
from tests.faults.test_hostile import _memd_as, _unprivileged
from tests.jobkit import context, ingest, make_settings, write_session
from tests.jobs.dream.helpers import KEY as DKEY
from tests.jobs.dream.helpers import TARGET, make_ctx, mdir, mk_settings, write_mem
from tests.jobs.dream.helpers import ingest as d_ingest
from tests.jobs.dream.helpers import write_session as d_session
from tests.procs import DaemonProc, log_records, memd_env, wait_for

KEY = "-home-dev-webshop"  # the demo home's project (`memd demo`)
SID = "6d1f0c2e-1b7a-4c55-9a0e-5b8f3e2d4a10"
CWD = "/home/dev/webshop"
BOUND = 120.0  # seconds a command may take here (a loaded CI machine is slow); a hang is a failure, not a stuck suite
MEMORY = "---\nname: {name}\ndescription: {desc}\nmetadata:\n  type: {type}\n---\n\n{body}\n"
DURABLE = [("user", "Please always remember: we deploy the billing service only on Tuesdays, because of on-call."),
           ("assistant", "Understood, Tuesdays only.")]  # fmt: skip
OFFLINE = {"memd": {"provider": "offline"}}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled sample home, indexed, with a ledger and history: copied by each test that changes it."""
    base = tmp_path_factory.mktemp("demo") / "home"
    r = subprocess.run([*_memd(), "demo", str(base)], capture_output=True, text=True, env=memd_env(), timeout=120)
    assert r.returncode == 0, r.stderr
    return base


def _memd() -> list[str]:
    return memd_cmd()


def _copy(demo: Path, tmp: Path) -> Path:
    home = tmp / "home"
    shutil.copytree(demo, home, symlinks=True)
    return home


def _run(home: Path, *args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([*_memd(), "--home", str(home), *args], capture_output=True, text=True, timeout=BOUND,
                              env=env or memd_env(), input=stdin)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"`memd {' '.join(args)}` did not finish within {BOUND:g} s (waiting on a FIFO?)")


def _no_traceback(r: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in r.stderr, r.stderr[-3000:]


def _one_line_error(r: subprocess.CompletedProcess[str], *words: str) -> None:
    """A failure told as one line on stderr (`memd: …`), naming what it is about."""
    _no_traceback(r)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("memd: ")]
    assert len(lines) == 1 and one_line(lines[0]) and all(w in lines[0] for w in words), r.stderr


# --------------------------------------------------------------------------- 1. FIFOs and devices

# (what is replaced by a FIFO, the command that waited on it forever before)
FIFO_CASES = [
    ("projects/-home-dev-webshop/memory/MEMORY.md", ("run-now", "index", "--project", KEY)),
    ("projects/-home-dev-webshop/memory/MEMORY.md", ("context", "--cwd", CWD)),
    ("memory.md", ("context", "--cwd", CWD)),
    (f"projects/{KEY}/{SID}/session-memory/summary.md", ("run-now", "summary", "--force", "--session", SID)),
    ("settings.json", ("status",)),
    ("settings.json", ("config", "--check")),
    ("settings.json", ("run-now", "index", "--global")),
    ("settings.json", ("doctor",)),
    ("memd/state.sqlite", ("status",)),
    ("memd/state.sqlite", ("doctor",)),
    ("memd/search.sqlite", ("search", "tests", "--project", KEY)),
    ("memd/search.sqlite", ("doctor",)),
    ("memd/logs/memd.jsonl", ("run-now", "index", "--global")),
    ("memd/logs/memd.jsonl", ("logs",)),
]


@pytest.mark.parametrize("rel,args", FIFO_CASES, ids=[f"{r.rsplit('/', 1)[-1]}:{a[0]}" for r, a in FIFO_CASES])
def test_a_fifo_where_memd_reads_a_file_is_refused_in_one_line_never_waited_on(
    demo: Path, tmp_path: Path, rel: str, args: tuple[str, ...], fault_report: Counter[str]
) -> None:
    home = _copy(demo, tmp_path)
    target = home / rel
    for side in (target, Path(f"{target}-wal"), Path(f"{target}-shm")):
        side.unlink(missing_ok=True)
    os.mkfifo(target)
    t = time.monotonic()
    r = _run(home, *args)
    took = time.monotonic() - t
    _no_traceback(r)
    said = r.stdout + r.stderr
    if r.returncode != 0 or "FIFO" in said:
        assert "FIFO" in said and (target.name in said or "search.sqlite" in said), said[-2000:]
        assert all(one_line(ln) for ln in said.splitlines() if "FIFO" in ln)
    if rel != "memd/search.sqlite":  # the search cache is set aside and rebuilt; everything else is left as it is
        assert target.exists() and not target.is_file(), "memd replaced a FIFO it should have left alone"
    fault_report["extremes: FIFO places refused without waiting"] += 1
    assert took < BOUND


def test_settings_linked_to_dev_zero_is_refused_at_once(demo: Path, tmp_path: Path) -> None:
    home = _copy(demo, tmp_path)
    (home / "settings.json").unlink()
    os.symlink("/dev/zero", home / "settings.json")
    r = _run(home, "config", "--check")
    assert r.returncode == 5 and "character device" in r.stderr and "keeping the last settings" in r.stderr, r.stderr
    _no_traceback(r)
    assert _run(home, "status").returncode == 0


def test_a_daemon_with_fifos_in_place_finishes_its_jobs_and_stops_on_sigterm(demo: Path, tmp_path: Path) -> None:
    """Before: the index job opened the FIFO MEMORY.md for reading and waited forever, holding the
    project's lock; SIGTERM waited for the job, so the daemon never stopped."""
    home = _copy(demo, tmp_path)
    mdir = home / "projects" / KEY / "memory"
    (mdir / "MEMORY.md").unlink()
    os.mkfifo(mdir / "MEMORY.md")
    (home / "memory.md").unlink()
    os.mkfifo(home / "memory.md")
    seen = len(log_records(home))  # the demo's own log has index runs already: only new ones count
    with DaemonProc(home) as d:
        for p in list(mdir.glob("*.md")) + list((home / "memory").glob("*.md")):  # a hand edit: the index jobs run
            if p.name != "MEMORY.md":
                p.write_text(p.read_text() + "\nedited\n")
        for target in (f"project:{KEY}", "global"):
            wait_for(lambda t=target: [x for x in log_records(home)[seen:] if x.get("event") == "job.finished"
                                       and x.get("job") == "index" and x.get("target") == t])  # fmt: skip
        assert d.stop() == 0
    r = _run(home, "run-now", "index", "--project", KEY, "--no-wait")  # the lock was released
    assert r.returncode == 0, r.stderr
    problems = [x for x in log_records(home) if x.get("event") == "memory.unreadable"]
    assert problems and all("FIFO" in x["reason"] and one_line(x["reason"]) for x in problems), problems


# --------------------------------------------------------------------------- 2. directory symlinks


def _offline_home(tmp: Path) -> tuple[Path, Path]:
    home, outside = tmp / "home", tmp / "outside"
    outside.mkdir()
    home.mkdir()
    (home / "settings.json").write_text(json.dumps(OFFLINE))
    write_session(home / "projects" / "-work-app" / "s1.jsonl", DURABLE)
    return home, outside


@pytest.mark.parametrize("link", ["memd", "memd/logs", "memd/history"])
def test_links_in_memds_own_directories_are_refused_and_nothing_lands_outside(
    tmp_path: Path, link: str, fault_report: Counter[str]
) -> None:
    home, outside = _offline_home(tmp_path)
    if link != "memd":
        assert _run(home, "scan").returncode == 0  # memd/ exists, made by memd
        shutil.rmtree(home / link, ignore_errors=True)
    (outside / "target").mkdir()
    os.symlink(outside / "target", home / link)
    before = snapshot(outside)
    ran = [_run(home, *args) for args in (("scan",), ("run-now", "extract", "--all", "--force"), ("run-now", "index", "--global"),
                                          ("remember", "--global", "Tabs, never spaces.", "--type", "user"), ("undo", "--global"))]  # fmt: skip
    assert snapshot(outside) == before, sorted(set(snapshot(outside)) - set(before))
    for r in ran:
        _no_traceback(r)
    said = "\n".join(r.stderr for r in ran)
    assert "symlink" in said and str(home / link) in said, said
    assert all(one_line(ln) for ln in said.splitlines() if "symlink" in ln)
    assert os.readlink(home / link) == str(outside / "target")  # left as it was
    fault_report["extremes: links in memd/ refused"] += 1


def test_linked_memory_and_projects_are_never_written_through_and_doctor_says_where(tmp_path: Path) -> None:
    """Issue 23: `memory/` and `projects/` as links to elsewhere are refused as a link at `memd/` is."""
    home, outside = _offline_home(tmp_path)
    (outside / "drawer").mkdir()
    shutil.move(str(home / "projects"), outside / "projects")
    os.symlink(outside / "projects", home / "projects")
    os.symlink(outside / "drawer", home / "memory")
    before = snapshot(outside)
    for args in (("run-now", "extract", "--all", "--force"), ("run-now", "index", "--global")):
        _no_traceback(_run(home, *args))
    assert snapshot(outside) == before, sorted(set(snapshot(outside)) - set(before))
    r = _run(home, "doctor")
    links = [ln for ln in r.stdout.splitlines() if " links " in ln]
    assert links and links[0].startswith("FAIL") and f"memory/ → {outside / 'drawer'}" in links[0], r.stdout
    assert f"projects/ → {outside / 'projects'}" in links[0]
    (home / "memd" / "history").mkdir(parents=True, exist_ok=True)
    os.symlink(outside, home / "memd" / "history" / "global")
    bad = [ln for ln in _run(home, "doctor").stdout.splitlines() if " links " in ln]
    assert bad and bad[0].startswith("FAIL") and "history/global" in bad[0], bad


# --------------------------------------------------------------------------- 3. settings: ranges and size


@pytest.mark.parametrize("field,value", [
    ("memory.sessionMemory.minInitTokens", 2**63),
    ("memory.dream.minHours", 10**400),
    ("memd.timeoutSeconds", 10**20),
    ("memd.maxRetries", 10**6),
    ("memd.dailyTokenBudget", 2**64),
    ("memd.sync.remote", "x" * 100_000),
])  # fmt: skip
def test_every_setting_has_a_range(field: str, value: Any) -> None:
    section, *path = field.split(".")
    tree: dict[str, Any] = {}
    node = tree.setdefault(section, {})
    for p in path[:-1]:
        node = node.setdefault(p, {})
    node[path[-1]] = value
    s = st.parse_text(json.dumps(tree))
    default = st.defaults().get(field)
    assert s.get(field) == default and len(s.warnings) == 1 and one_line(s.warnings[0]), s.warnings
    assert field in s.warnings[0] and "using default" in s.warnings[0]


def test_settings_accepted_before_but_unusable_no_longer_crash_a_run(tmp_path: Path) -> None:
    """minInitTokens 2^63 passed `config --check` and made the summary job's first look at new
    bytes a traceback (a Python int too large for SQLite): the service restarted in a loop."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps({"memory": {"sessionMemory": {"minInitTokens": 2**63},
                                                               "dream": {"minHours": 10**400}},
                                                    "memd": {"provider": "offline", "timeoutSeconds": 10**20}}))  # fmt: skip
    write_session(home / "projects" / "-work-app" / "s1.jsonl", DURABLE)
    check = _run(home, "config", "--check")
    assert check.returncode == 5 and len(check.stderr.strip().splitlines()) == 3, check.stderr
    for args in (("scan",), ("run-now", "summary"), ("run-now", "extract"), ("run-now", "dream", "--global"), ("status",)):
        r = _run(home, *args)
        _no_traceback(r)
        assert r.returncode == 0, (args, r.stderr[-2000:])


def test_a_10_mb_settings_file_is_refused_at_once_keeping_the_last_good_settings(demo: Path, tmp_path: Path,
                                                                              fault_notes: list[str]) -> None:  # fmt: skip
    home = _copy(demo, tmp_path)
    # JSON with a comment (so json5 would have had to parse it: ~12 ms a KB, minutes for 10 MB)
    big = "// generated\n" + json.dumps({"memd": {"provider": "offline"}, "padding": ["x" * 1000] * 10_000})
    (home / "settings.json").write_text(big)
    assert len(big) > 10_000_000
    t = time.monotonic()
    r = _run(home, "config", "--check")
    took = time.monotonic() - t
    assert r.returncode == 5 and "over 1 MiB" in r.stderr and "keeping the last settings" in r.stderr, r.stderr
    t = time.monotonic()
    s = _run(home, "status")
    took_status = time.monotonic() - t
    # wall time of a whole process (start-up included) on a machine that may be loaded: json5 took minutes
    assert s.returncode == 0 and took < 60 and took_status < 60, (took, took_status)
    fault_notes.append(f"a 10 MB settings.json: `config --check` {took * 1000:.0f} ms, `status` {took_status * 1000:.0f} ms "
                       "(refused over 1 MiB, last good settings kept)")  # fmt: skip


def test_comments_and_trailing_commas_are_read_without_json5_at_any_size() -> None:
    pad = "x" * 500_000
    t = time.process_time()  # CPU time: a loaded machine stretches wall time, not the work done here
    s = st.parse_text('// c\n{"memory": {"dream": {"minHours": 48,},}, /* "q" */ "pad": "' + pad + '", "u": "a//b",}')
    assert time.process_time() - t < 1.0
    assert s.broken is None and s.get("memory.dream.minHours") == 48 and not s.strict_json


# --------------------------------------------------------------------------- 4. corruption


def _checkpoint(db: Path) -> None:
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def _damage(db: Path, how: str) -> None:
    _checkpoint(db)
    data = bytearray(db.read_bytes())
    if how == "truncated":
        db.write_bytes(data[: len(data) // 2])
    elif how == "zero bytes":
        db.write_bytes(b"")
    elif how == "header garbage":
        data[:16] = b"garbage garbage!"
        db.write_bytes(data)
    elif how == "mid-file page garbage":
        size = int.from_bytes(data[16:18], "big")
        rnd = __import__("random").Random(7)
        for page in range(1, len(data) // size):
            at = page * size + size // 4
            data[at : at + size // 4] = bytes(rnd.randrange(256) for _ in range(size // 4))
        db.write_bytes(data)
    elif how == "wrong schema":
        db.unlink()
        conn = sqlite3.connect(db)
        conn.executescript("CREATE TABLE memories(x); CREATE TABLE meta(key, value);"
                           "INSERT INTO meta VALUES('segmenter', 'zwsp-v1');"
                           f"PRAGMA user_version={SCHEMA_VERSION};")  # fmt: skip  (the current version, wrong columns)
        conn.close()
    elif how == "a directory":
        db.unlink()
        db.mkdir()
    else:
        raise ValueError(how)


DAMAGE = ["truncated", "zero bytes", "header garbage", "mid-file page garbage", "wrong schema", "a directory"]


@pytest.mark.parametrize("how", DAMAGE)
def test_a_damaged_search_db_is_set_aside_and_rebuilt(demo: Path, tmp_path: Path, how: str,
                                                     fault_report: Counter[str]) -> None:  # fmt: skip
    home = _copy(demo, tmp_path)
    db = home / "memd" / "search.sqlite"
    _damage(db, how)
    r = _run(home, "search", "race", "--project", KEY, "--json")
    _no_traceback(r)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "run-tests-race" in [h["name"] for h in json.loads(r.stdout)]
    assert list(db.parent.glob("search.sqlite.corrupt-*")) or how == "zero bytes"
    # the writer's own paths: an index run on a damaged database rebuilds it too
    _damage(db, how)
    i = _run(home, "run-now", "index", "--project", KEY)
    assert i.returncode == 0 and "Traceback" not in i.stderr, i.stderr[-2000:]
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    assert conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
    files = {f for (f,) in conn.execute("SELECT file FROM memories")}
    conn.close()
    assert any(f.startswith("memory/") for f in files) and any(f.startswith(f"projects/{KEY}/") for f in files)
    assert len([p for p in db.parent.glob("search.sqlite.corrupt-*") if not p.name.endswith(("-wal", "-shm"))]) <= 3
    # damage no statement touches: found by the drawer's index run (the daemon's reconcile), rebuilt whole
    _damage(db, how)
    g = _run(home, "run-now", "index", "--global")
    assert g.returncode == 0 and "Traceback" not in g.stderr, g.stderr[-2000:]
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    assert conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
    assert {f for (f,) in conn.execute("SELECT file FROM memories")} == files
    conn.close()
    fault_report["extremes: damaged search databases rebuilt"] += 1


def test_a_half_made_search_db_is_filled_from_every_directory_by_the_first_write(tmp_path: Path) -> None:
    """A kill right after the database file was created left it empty; an extraction then indexed
    only the directories it wrote to, and search missed the rest until an index run."""
    home = tmp_path / "home"
    (home / "settings.json").parent.mkdir(parents=True)
    (home / "settings.json").write_text(json.dumps(OFFLINE))
    other = home / "projects" / "-work-other" / "memory"
    other.mkdir(parents=True)
    (other / "deploy-window.md").write_text(MEMORY.format(name="deploy-window", desc="Deploys on Tuesdays",
                                                          type="project", body="Only on Tuesdays."))  # fmt: skip
    write_session(home / "projects" / "-work-app" / "s1.jsonl", DURABLE)
    (home / "memd").mkdir(mode=0o700)
    (home / "memd" / "search.sqlite").write_bytes(b"")  # created, then killed
    r = _run(home, "run-now", "extract", "--all", "--force")
    assert r.returncode == 0, r.stderr
    conn = sqlite3.connect(f"file:{home / 'memd' / 'search.sqlite'}?mode=ro", uri=True)
    files = {f for (f,) in conn.execute("SELECT file FROM memories")}
    conn.close()
    assert "projects/-work-other/memory/deploy-window.md" in files, files


@pytest.mark.parametrize("how", ["zero bytes", "mid-file page garbage", "header garbage", "a directory"])
def test_a_damaged_state_db_is_one_line(demo: Path, tmp_path: Path, how: str) -> None:
    home = _copy(demo, tmp_path)
    _damage(home / "memd" / "state.sqlite", how)
    for args in (("status",), ("sessions",), ("run-now", "index", "--global"), ("scan",), ("doctor",)):
        r = _run(home, *args)
        _no_traceback(r)
        if r.returncode != 0 and args != ("doctor",):
            _one_line_error(r, "state.sqlite")


def _dream_entry(home: Path) -> tuple[Any, str]:
    """A dream's history entry of the drawer, made through memd.history.runs as a dream makes it."""

    h = Home(home)
    ref = Place.global_()
    run_id = store.new_run_id(datetime.now(UTC))
    entry = swap.snapshot(h, ref, run_id)
    store.write_run_info(entry, {"run": run_id, "scope": "global", "kind": "dream", "time": datetime.now(UTC).isoformat(),
                                   "provider": "offline", "changes": {}})  # fmt: skip
    return entry, run_id


def test_undo_refuses_a_snapshot_that_no_longer_matches_its_checksums(demo: Path, tmp_path: Path) -> None:
    home = _copy(demo, tmp_path)
    entry, run_id = _dream_entry(home)
    pack = entry / PACK_FILE
    member = next(e for e in Pack.open(pack).files() if e["path"].endswith(".md"))
    whole = pack.read_bytes()
    data = bytearray(whole)
    data[member["offset"] + member["size"] - 1] ^= 0x01  # the last byte of one memory, changed in the pack
    pack.write_bytes(bytes(data))
    live = snapshot(home / "memory")
    r = _run(home, "undo", "--global", run_id)
    assert r.returncode == 2, r.stderr
    _one_line_error(r, run_id, "does not match", member["path"])
    assert snapshot(home / "memory") == live  # nothing restored
    pack.write_bytes(whole)
    info = json.loads((entry / "run.json").read_text())
    info["snapshot_sha256"]["gone.md"] = "0" * 64  # a file missing from the snapshot: refused too
    (entry / "run.json").write_text(json.dumps(info))
    _one_line_error(_run(home, "undo", "--global", run_id), "gone.md is missing")


def test_a_run_with_a_damaged_run_json_is_listed_as_damaged_and_not_undone(demo: Path, tmp_path: Path) -> None:
    home = _copy(demo, tmp_path)
    entry, run_id = _dream_entry(home)
    (entry / "run.json").write_text('{"run": "' + run_id + '", "kind": "dre')  # cut short
    r = _run(home, "history", "--json")
    rows = {x["run"]: x for x in json.loads(r.stdout)}
    assert run_id in rows and rows[run_id]["kind"] == "damaged" and rows[run_id]["scope"] == "global", rows.get(run_id)
    assert "run.json is damaged" in rows[run_id]["reason"]
    text_ = _run(home, "history", "--global")
    assert run_id in text_.stdout and "damaged" in text_.stdout
    u = _run(home, "undo", "--global")  # the latest run is the damaged one
    assert u.returncode == 2
    _one_line_error(u, run_id, "damaged")
    assert entry.exists()  # listed, never swept


# --------------------------------------------------------------------------- 5. smaller


ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x9b31m"


def test_control_sequences_from_a_model_are_neither_stored_nor_printed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_session(home / "projects" / "-work-app" / "s1.jsonl", DURABLE)
    ingest(home)
    answer = ops_reply(op(name="deploy-day", description=f"Deploys on Tuesdays{ESCAPES}", body=f"Only Tuesdays.{ESCAPES}\nTab\tok",
                          reason=f"said so{ESCAPES}"))  # fmt: skip
    with FakeAnthropic([text("yes"), answer]) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url)
        r = run_job(ctx, extract, Place("session", "-work-app", "s1"))
        ctx.conn.close()
    assert r.outcome == "ok", r
    stored = (home / "projects" / "-work-app" / "memory" / "deploy-day.md").read_text()
    assert not any(c in stored for c in "\x1b\x07\x9b") and "Tab\tok" in stored, repr(stored)
    # a file written by hand (or before the rule) still holds them: printing strips them
    (home / "memory").mkdir(exist_ok=True)
    (home / "memory" / "hand.md").write_text(MEMORY.format(name="hand", desc='"by hand\\e]0;pwned\\a\\x9b"',
                                                           type="user", body=f"body{ESCAPES}"))  # YAML escapes
    for args in (("list", "--project", "-work-app"), ("show", "hand", "--project", "-work-app"),
                 ("search", "hand", "--project", "-work-app")):  # fmt: skip
        out = _run(home, *args)
        assert out.returncode == 0 and "hand" in out.stdout, out.stderr
        assert not any(c in out.stdout for c in "\x1b\x07\x9b"), (args, repr(out.stdout))


def test_times_in_the_future_are_clamped_to_now(tmp_path: Path) -> None:
    home = tmp_path / "home"
    s = mk_settings(dream={"minHours": 24, "minSessions": 1})
    write_mem(mdir(home), "a", "alpha", "project", "alpha body", age_h=24 * 30)
    t0 = datetime.now(UTC).replace(microsecond=0) - timedelta(days=2)
    # 1. a last consolidation in 2099: taken as now (and kept), so minHours count from then
    ctx = make_ctx(home, s, now=t0)
    set_cursor(ctx.conn, "dream", str(TARGET), {"last": "2099-01-01T00:00:00Z", "run": None}, iso(t0))
    d_session(home, DKEY, "s1", t0 + timedelta(hours=1))
    d_ingest(home)
    assert dream.due(ctx, only=TARGET) == []  # clamped to t0: 0 of 24 hours
    ctx.now = lambda: t0 + timedelta(hours=25)
    assert dream.due(ctx, only=TARGET) == [TARGET], due_decisions(ctx, [TARGET])
    # 2. a session dated 2099, read before the last consolidation: it does not count again
    home2 = tmp_path / "home2"
    write_mem(mdir(home2), "a", "alpha", "project", "alpha body", age_h=24 * 30)
    d_session(home2, DKEY, "future", datetime(2099, 1, 1, tzinfo=UTC))
    d_ingest(home2)
    read_at = datetime.now(UTC)
    ctx2 = make_ctx(home2, s, now=read_at + timedelta(hours=30))
    set_cursor(ctx2.conn, "dream", str(TARGET), {"last": iso(read_at + timedelta(hours=1)), "run": None}, iso(read_at))
    ok, why = due_decisions(ctx2, [TARGET])[TARGET]
    assert not ok and "0/1 sessions" in why, why


def test_a_killed_index_writes_temporary_files_are_swept(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "memory").mkdir(parents=True)
    (home / "memory" / "tabs.md").write_text(MEMORY.format(name="tabs", desc="Tabs", type="user", body="Tabs."))
    (home / "memd").mkdir(mode=0o700)
    old = time.time() - 3600
    left = [home / ".memory.md.k2j3h4g5.tmp", home / "memory" / ".MEMORY.md.a1b2c3d4.tmp",
            home / "memd" / ".settings.last-good.json.q9w8e7r6.tmp"]  # fmt: skip
    kept = [home / ".memory.md.fresh123.tmp", home / ".bashrc.tmp", home / "notes.tmp"]
    for p in left + kept:
        p.write_text("half")
    for p in left + kept[1:]:
        os.utime(p, (old, old))
    ctx = context(home, make_settings(), now=datetime.now(UTC))
    r = run_job(ctx, index_job, Place("global"))
    ctx.conn.close()
    assert r.outcome == "ok" and r.details["temp_files_swept"] == len(left), r
    assert not any(p.exists() for p in left) and all(p.exists() for p in kept)


@pytest.mark.parametrize("existing,said", [("Straße-Regeln", "STRASSE-REGELN"), ("Prefers-Tabs", "prefers tabs")])
def test_case_variants_of_one_name_are_one_memory(tmp_path: Path, existing: str, said: str) -> None:
    home = tmp_path / "home"
    write_session(home / "projects" / "-work-app" / "s1.jsonl", DURABLE)
    ingest(home)
    mdir = home / "projects" / "-work-app" / "memory"
    first = ops_reply(op(name=existing, description="the rule", body="first"))
    second = ops_reply(op(name=said, op="update", description="the rule, again", body="second"))
    with FakeAnthropic([text("yes"), first]) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url)
        assert run_job(ctx, extract, Place("session", "-work-app", "s1")).outcome == "ok"
        ctx.conn.close()
    write_session(home / "projects" / "-work-app" / "s1.jsonl", [("user", "And remember the rule again, please."),
                                                                  ("assistant", "Noted.")], start=10)  # fmt: skip
    ingest(home)
    with FakeAnthropic([text("yes"), second, second]) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url)
        assert run_job(ctx, extract, Place("session", "-work-app", "s1")).outcome == "ok"
        ctx.conn.close()
    res = scan_dir(mdir, "project", "-work-app")
    assert len(res.memories) == 1 and res.memories[0].body.strip() == "second", [m.path.name for m in res.memories]
    assert not res.problems, res.problems


def test_a_runaway_answer_is_one_summary_line_not_thousands(tmp_path: Path, fault_report: Counter[str]) -> None:
    home = tmp_path / "home"
    write_session(home / "projects" / "-work-app" / "s1.jsonl", DURABLE)
    ingest(home)
    answer = ops_reply(*[op(name=f"fact-{i}", description=f"fact {i}", body=f"body {i}") for i in range(10_000)])
    with FakeAnthropic([text("yes"), answer]) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url)
        ctx.log = log = RecordingLog()
        r = run_job(ctx, extract, Place("session", "-work-app", "s1"))
        ctx.conn.close()
    assert r.outcome == "ok" and r.details["rejected"] == 9_950, r.details
    warnings = [x for x in log.records if x["level"] == "warning"]
    assert len(warnings) <= 5, Counter(x["event"] for x in warnings)
    summary = [x for x in warnings if x["event"] == "operation.rejected_summary"]
    assert summary and summary[0]["count"] == 9_950 and len(summary[0]["examples"]) <= 3
    assert summary[0]["reasons"] == [{"reason": "over the cap of 50 operations", "count": 9_950}]
    fault_report["extremes: runaway answer operations summarised"] += 9_950


def test_expected_failures_are_one_line_without_a_traceback_and_before_any_model_call(tmp_path: Path) -> None:
    for case in ("memory directory is a file", "drawer is a file", "transcript deleted"):
        home = tmp_path / case.replace(" ", "-") / "home"
        write_session(home / "projects" / "-work-app" / "s1.jsonl", DURABLE)
        ingest(home)
        if case == "memory directory is a file":
            (home / "projects" / "-work-app" / "memory").write_text("not a directory")
        elif case == "drawer is a file":
            (home / "memory").write_text("not a directory")
        else:
            (home / "projects" / "-work-app" / "s1.jsonl").unlink()
        with FakeAnthropic([text("yes"), ops_reply(op(name="kept"))]) as api:
            ctx = context(home, make_settings(), fake_url=api.base_url)
            ctx.log = log = RecordingLog()
            r = run_job(ctx, extract, Place("session", "-work-app", "s1"))
            ctx.conn.close()
            calls = len([q for q in api.requests if q.path == "/v1/messages"])
        assert calls == 0, (case, calls)  # found before the paid gate and extraction calls
        assert r.outcome == ("skipped" if case == "transcript deleted" else "failed") and one_line(r.reason), (case, r)
        assert not [x for x in log.records if "traceback" in x], case
        assert ("is gone" if case == "transcript deleted" else "not a directory") in r.reason, r.reason


def test_an_unreadable_transcript_fails_in_one_line_without_a_traceback(tmp_path: Path) -> None:
    who = _unprivileged()
    if who is None:
        pytest.skip("running as root with neither setpriv nor runuser nor a 'nobody' user: modes cannot be enforced")
    prefix, uid, gid = who
    base = Path(tempfile.mkdtemp(prefix="memd-000-", dir="/tmp"))
    try:
        os.chmod(base, 0o711)
        home = base / "home"
        home.mkdir()
        (home / "settings.json").write_text(json.dumps(OFFLINE))
        write_session(home / "projects" / "-work-app" / "s1.jsonl", DURABLE)
        if uid:
            subprocess.run(["chown", "-R", f"{uid}:{gid}", str(home)], check=True)
        env = memd_env()
        assert _memd_as(prefix, home, "scan", env=env).returncode == 0
        os.chmod(home / "projects" / "-work-app" / "s1.jsonl", 0o000)
        r = _memd_as(prefix, home, "run-now", "extract", "--all", "--force", env=env)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        last = [x for x in log_records(home) if x.get("event") == "job.finished" and x.get("job") == "extract"][-1]
        assert last["outcome"] == "failed" and "Permission denied" in last["reason"] and "traceback" not in last, last
        assert one_line(last["reason"])
    finally:
        subprocess.run(["chmod", "-R", "u+rwX", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)


