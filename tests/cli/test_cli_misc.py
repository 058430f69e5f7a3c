"""CLI commands a newcomer meets: demo, doctor, completion, search/list/show."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.conftest import memd_cmd
from tests.procs import memd_env, run_memd

MEMORY = "---\nname: {name}\ndescription: {desc}\nmetadata:\n  type: {type}\n---\n{body}\n"


def _put(d: Path, name: str, desc: str, body: str, type_: str = "project", age_days: float = 0) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"{name}.md"
    p.write_text(MEMORY.format(name=name, desc=desc, body=body, type=type_))
    if age_days:
        t = p.stat().st_mtime - age_days * 86400
        os.utime(p, (t, t))
    return p


def test_demo_runs_on_the_bundled_sample(tmp_path: Path) -> None:
    target = tmp_path / "sample-home"
    r = subprocess.run([*memd_cmd(), "demo", str(target)], check=False, capture_output=True, text=True, env=memd_env(), timeout=300)
    assert r.returncode == 0, r.stderr
    assert "ingested 4 sessions" in r.stdout
    assert "where to look:" in r.stdout and "daemon:" in r.stdout
    assert (target / "memory" / "MEMORY.md").exists()
    assert (target / "memory.md").exists()
    # the sample in the repository is untouched
    assert not (Path(__file__).resolve().parents[2] / "memd" / "sample_home" / "memd").exists()


def test_search_list_show_with_staleness(tmp_path: Path) -> None:
    home = tmp_path / "h"
    _put(home / "memory", "tabs", "indents with tabs", "Use tabs, never spaces.", "user", age_days=3)
    _put(home / "projects" / "-repo" / "memory", "deploy-fridays", "deploys happen on Fridays", "Only on Fridays.")
    _put(home / "projects" / "-other" / "memory", "secret-plan", "another project's memory", "Fridays too.")
    r = run_memd(home, "search", "fridays", "--project", "-repo", "--json")
    assert r.returncode == 0, r.stderr
    hits = json.loads(r.stdout)
    assert [h["name"] for h in hits] == ["deploy-fridays"]  # the other project's memory is not searched
    r = run_memd(home, "search", "tab*", "--project", "-repo", "--json")
    (hit,) = json.loads(r.stdout)
    assert hit["name"] == "tabs" and hit["stale"] and "3 days old" in hit["stale"]
    r = run_memd(home, "list", "--project", "-repo", "--json")
    names = {m["name"] for m in json.loads(r.stdout)["memories"]}
    assert names == {"tabs", "deploy-fridays"}
    r = run_memd(home, "show", "tabs", "--project", "-repo")
    assert r.returncode == 0 and "⚠" in r.stdout and "Use tabs" in r.stdout
    assert run_memd(home, "show", "nope", "--project", "-repo").returncode == 2
    assert run_memd(home, "search", "x", "--project", "a", "--cwd", ".").returncode == 2


def test_doctor_reports_each_check(tmp_path: Path) -> None:
    home = tmp_path / "h"
    (home / "memd").mkdir(parents=True)
    home.chmod(0o755)
    (home / "settings.json").write_text('{"memory": {"dream": {"minHours": -1}}}')
    r = run_memd(home, "doctor", "--json")
    assert r.returncode == 1
    checks = {c["name"]: c for c in json.loads(r.stdout)}
    assert checks["home"]["ok"] and "0755" in checks["home"]["detail"]  # the agent's directory: not memd's to judge
    (home / "memd").chmod(0o755)  # memd's own directory is
    loose = {c["name"]: c for c in json.loads(run_memd(home, "doctor", "--json").stdout)}
    assert not loose["permissions"]["ok"] and "chmod go-rwx" in loose["permissions"]["fix"]
    (home / "memd").chmod(0o700)
    assert not checks["settings"]["ok"] and "memory.dream.minHours" in checks["settings"]["detail"]
    assert checks["provider"]["ok"] and "offline" in checks["provider"]["detail"]
    assert not checks["daemon"]["ok"]
    r = run_memd(home, "doctor", env=memd_env(ANTHROPIC_API_KEY="sk-ant-test", MEMD_SYSTEMD_USER_DIR=str(tmp_path / "units")))
    assert "anthropic, key set" in r.stdout and "no call made" in r.stdout
    (home / "memd" / "state.sqlite").write_bytes(b"garbage" * 1000)
    r = run_memd(home, "doctor", "--json")
    assert not {c["name"]: c for c in json.loads(r.stdout)}["state"]["ok"]


def test_completion_scripts() -> None:
    for shell, marker in (("bash", "complete"), ("zsh", "compdef"), ("fish", "complete")):
        r = subprocess.run([*memd_cmd(), "completion", shell], check=False, capture_output=True, text=True, env=memd_env())
        assert r.returncode == 0 and marker in r.stdout and "_MEMD_COMPLETE" in r.stdout


def test_index_sweeps_stale_temp_files_only(tmp_path: Path) -> None:
    home = tmp_path / "h"
    d = home / "memory"
    _put(d, "keep", "a memory", "Body.")
    old = d / ".keep.md.abc123.tmp"
    fresh = d / ".keep.md.def456.tmp"
    other = d / ".notes.txt"
    for p in (old, fresh, other):
        p.write_text("partial")
    t = old.stat().st_mtime - 3600
    os.utime(old, (t, t))
    os.utime(other, (t, t))
    r = run_memd(home, "run-now", "index", "--global", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["details"]["temp_files_swept"] == 1
    assert not old.exists() and fresh.exists() and other.exists() and (d / "keep.md").exists()


def test_list_reads_the_search_index_for_files_it_still_matches(tmp_path: Path) -> None:
    """`memd list` takes a memory from search.sqlite while its file's size and mtime match the row
    (no file parsed), and parses the file again once it changed or the index is gone."""
    home = tmp_path / "home"
    p = _put(home / "projects" / "-repo" / "memory", "deploy", "deploys on fridays", "Only on Fridays.")
    assert run_memd(home, "search", "fridays", "--project", "-repo").returncode == 0  # builds the index
    st = p.stat()
    p.write_text(p.read_text().replace("deploys on fridays", "deploys on mondays"))  # same size
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))

    def names() -> list[str]:
        r = run_memd(home, "list", "--all", "--json")
        assert r.returncode == 0, r.stderr
        return [m["description"] for m in json.loads(r.stdout)["memories"]]

    assert names() == ["deploys on fridays"]  # the row, not the file: the file was not read
    (home / "memd" / "search.sqlite").unlink()
    assert names() == ["deploys on mondays"]  # no index: every file parsed
    assert run_memd(home, "search", "mondays", "--project", "-repo").returncode == 0
    os.utime(p, (st.st_atime + 5, st.st_mtime + 5))
    p.write_text(p.read_text().replace("mondays", "sundays"))
    assert names() == ["deploys on sundays"]  # changed since indexed: parsed again
