"""The daemon as a process running model jobs against the fake API as a process."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from memd.memory.scan import scan_dir
from tests.fakeapi import op, ops_text
from tests.jobkit import write_session
from tests.procs import DaemonProc, FakeApiProc, log_records, memd_env, run_memd, wait_for, wait_log

KEY = "-work-app"

OPS = ops_text(op(scope="project", name="deploy-fridays", type="project", description="deploys happen on Fridays",
                  body="We deploy on Fridays only. **Why:** the on-call rota."))  # fmt: skip


def script(delay: float = 0.0) -> dict:
    extract_reply = {"kind": "text", "text": OPS}
    if delay:
        extract_reply["delay"] = delay
    return {"rules": [{"if_system_contains": "memory gate", "reply": {"kind": "text", "text": "yes"}},
                      {"if_system_contains": "You maintain the long-term memory", "reply": extract_reply}],
            "default": {"kind": "text", "text": "no"}}  # fmt: skip


def _env(api: FakeApiProc) -> dict[str, str]:
    return memd_env(ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="test-key")


@pytest.mark.slow
def test_append_triggers_gate_and_extraction(tmp_path: Path) -> None:
    home = tmp_path / "h"
    transcript = home / "projects" / KEY / "s1.jsonl"
    write_session(transcript, [("assistant", "hello")])
    with FakeApiProc(tmp_path, script()) as api, DaemonProc(home, env=_env(api)) as d:
        write_session(transcript, [("user", "Remember that we deploy only on Fridays, please."),
                                   ("assistant", "Noted.")], start=1)  # fmt: skip
        mdir = home / "projects" / KEY / "memory"
        wait_for(lambda: (mdir / "MEMORY.md").exists() and "deploy-fridays" in (mdir / "MEMORY.md").read_text())
        rec = wait_log(home, event="job.finished", job="extract", outcome="ok")
        assert rec["calls"] == 2 and rec["input_tokens"] > 0 and "prompt" not in json.dumps(rec)
        assert [r["body"]["model"] for r in api.requests()] == ["claude-haiku-4-5", "claude-sonnet-4-6"]
        assert d.stop() == 0
    (m,) = scan_dir(mdir, "project", KEY).memories
    assert m.name == "deploy-fridays" and m.metadata["provider"] == "anthropic"


@pytest.mark.slow
def test_kill_9_mid_job_then_restart_reruns_and_files_are_whole(tmp_path: Path) -> None:
    home = tmp_path / "h"
    transcript = home / "projects" / KEY / "s1.jsonl"
    write_session(transcript, [("user", "Remember that we deploy only on Fridays, please."), ("assistant", "Noted.")])
    mdir = home / "projects" / KEY / "memory"
    with FakeApiProc(tmp_path, script(delay=30)) as api:
        with DaemonProc(home, env=_env(api)) as d:
            wait_for(lambda: len(api.requests()) >= 2)  # the extraction call is in flight
            d.stop(signal.SIGKILL)
        assert not (mdir / "deploy-fridays.md").exists()
    again = tmp_path / "again"
    again.mkdir()
    with FakeApiProc(again, script()) as api:
        with DaemonProc(home, env=_env(api)) as d:
            wait_for(lambda: (mdir / "deploy-fridays.md").exists())
            wait_log(home, event="job.finished", job="extract", outcome="ok")
            assert d.stop() == 0
    assert [m.name for m in scan_dir(mdir, "project", KEY).memories] == ["deploy-fridays"]
    assert scan_dir(mdir, "project", KEY).problems == []
    runs = [r for r in log_records(home) if r.get("event") == "job.started" and r.get("job") == "extract"]
    assert len(runs) >= 2  # the killed run and the rerun


def test_model_jobs_wait_without_a_key(tmp_path: Path) -> None:
    home = tmp_path / "h"
    (home).mkdir()
    (home / "settings.json").write_text('{"memd": {"provider": "anthropic"}}')
    write_session(home / "projects" / KEY / "s1.jsonl", [("user", "Remember that we deploy only on Fridays."), ("assistant", "ok")])
    with DaemonProc(home) as d:
        rec = wait_log(home, event="job.finished", job="extract")
        assert rec["outcome"] == "deferred" and "key" in rec["reason"].lower()

        st = json.loads(run_memd(home, "status", "--json").stdout)
        assert st["provider"]["waiting"] and st["jobs"]["extract"]["due"] == 1
        assert d.stop() == 0


@pytest.mark.slow
def test_a_service_without_the_env_key_reads_the_private_key_file(tmp_path: Path) -> None:
    home = tmp_path / "h"
    transcript = home / "projects" / KEY / "s1.jsonl"
    write_session(transcript, [("user", "Remember that we deploy only on Fridays, please."), ("assistant", "Noted.")])
    keyfile = home / "memd" / "anthropic.key"
    keyfile.parent.mkdir(parents=True)
    keyfile.write_text("sk-ant-from-file\n")
    keyfile.chmod(0o644)
    st = json.loads(run_memd(home, "status", "--json").stdout)
    assert st["provider"]["effective"] == "offline"  # a readable key file is ignored
    keyfile.chmod(0o600)
    st = json.loads(run_memd(home, "status", "--json").stdout)
    assert st["provider"]["effective"] == "anthropic"
    with FakeApiProc(tmp_path, script()) as api:
        env = memd_env(ANTHROPIC_BASE_URL=api.url)  # no ANTHROPIC_API_KEY, as under systemd
        with DaemonProc(home, env=env) as d:
            wait_for(lambda: (home / "projects" / KEY / "memory" / "deploy-fridays.md").exists())
            assert d.stop() == 0
        assert all(r["has_credential"] for r in api.requests())
