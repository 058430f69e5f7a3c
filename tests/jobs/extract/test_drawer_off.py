"""Issue 26 pt 3: with `memory.global.enabled: false` extraction writes nothing to the drawer, says in
the log what it held back, and tells the model the drawer is off."""

from __future__ import annotations

from pathlib import Path

from structlog.testing import capture_logs

from jobs import extract
from memd.job.runner import run_job
from memd.memory.scan import scan_dir
from memd.tree import Place
from tests.fakeapi import FakeAnthropic, op, ops_reply, request_system_text, text
from tests.jobkit import context, ingest, make_settings, write_session

KEY = "-work-repo"
SID = "s1"
OFF = {"global": {"enabled": False}}


def _home(tmp_path: Path, said: str) -> Path:
    home = tmp_path / "h"
    write_session(home / "projects" / KEY / f"{SID}.jsonl", [("user", said), ("assistant", "Noted.")])
    ingest(home)
    return home


def _drawer_files(home: Path) -> list[str]:
    d = home / "memory"
    return sorted(p.name for p in d.rglob("*")) if d.exists() else []


def test_offline_keeps_the_project_rule_and_names_the_held_back_drawer_memory(tmp_path: Path) -> None:
    home = _home(tmp_path, "I always prefer short commit messages, in every project. "
                           "We decided to use Postgres for the billing service.")  # fmt: skip
    ctx = context(home, make_settings(memd={"provider": "offline"}, memory=OFF))
    with capture_logs() as logs:
        r = run_job(ctx, extract, Place.session(KEY, SID))
    assert r.outcome == "ok", r
    assert _drawer_files(home) == []
    proj = scan_dir(home / "projects" / KEY / "memory", "project", KEY).memories
    assert [m.type for m in proj] == ["project"] and "Postgres" in proj[0].description
    [line] = [e for e in logs if e["event"] == "extraction.drawer_off"]
    assert line["withheld"] and all(w.startswith("global:") and "commit" in w for w in line["withheld"]), line


def test_the_model_is_told_the_drawer_is_off_and_its_global_answer_is_not_written(tmp_path: Path) -> None:
    home = _home(tmp_path, "Please always run the linter before committing; broken CI costs us hours.")
    ops = ops_reply(op(scope="global", name="run-linter-first", type="feedback", description="lint first"),
                    op(scope="project", name="ci-is-slow", type="project", description="CI takes hours"))  # fmt: skip
    with FakeAnthropic([text("yes"), ops]) as api:
        ctx = context(home, make_settings(memory=OFF), fake_url=api.base_url)
        with capture_logs() as logs:
            r = run_job(ctx, extract, Place.session(KEY, SID))
        assert r.outcome == "ok" and r.details["applied"]["added"] == 1, r
        ex = [q for q in api.requests if q.path == "/v1/messages"][-1]
        assert "drawer is switched off" in request_system_text(ex)
    assert _drawer_files(home) == []
    assert [m.name for m in scan_dir(home / "projects" / KEY / "memory", "project", KEY).memories] == ["ci-is-slow"]
    assert [e["withheld"] for e in logs if e["event"] == "extraction.drawer_off"] == [["global:run-linter-first"]]


def test_with_the_drawer_on_the_prompt_has_no_such_note(tmp_path: Path) -> None:
    home = _home(tmp_path, "Please always run the linter before committing; broken CI costs us hours.")
    with FakeAnthropic([text("yes"), ops_reply(op(scope="global", name="run-linter-first"))]) as api:
        ctx = context(home, make_settings(), fake_url=api.base_url)
        assert run_job(ctx, extract, Place.session(KEY, SID)).outcome == "ok"
        ex = [q for q in api.requests if q.path == "/v1/messages"][-1]
        assert "drawer is switched off" not in request_system_text(ex)
    assert "run-linter-first.md" in _drawer_files(home)


def test_no_writer_reaches_the_drawer_when_it_is_off(tmp_path: Path) -> None:
    """SPEC §18: nothing is written to the drawer — `memd remember --global` is refused with the reason."""
    import json  # noqa: PLC0415
    import subprocess  # noqa: PLC0415

    from tests.conftest import memd_cmd  # noqa: PLC0415
    from tests.procs import memd_env  # noqa: PLC0415

    home = tmp_path / "h"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps({"memory": OFF, "memd": {"provider": "offline"}}))
    r = subprocess.run([*memd_cmd(), "--home", str(home), "remember", "I prefer short answers, in every project.",
                        "--global"], capture_output=True, text=True, env=memd_env(), timeout=120, cwd=tmp_path)  # fmt: skip
    assert r.returncode != 0 and "drawer is off" in r.stderr, (r.returncode, r.stderr)
    assert _drawer_files(home) == []
