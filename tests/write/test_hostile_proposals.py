"""Proposals whose files were tampered with (issue 23): a FIFO never blocks `memd review accept`, a symlinked
proposed file is not read through, an unparseable proposal.json is listed as damaged (and can be dropped)."""

from __future__ import annotations

import os
from pathlib import Path

from memd.memory.operations import validate_operations
from memd.write import apply as memwrite
from memd.write import proposals
from tests.jobkit import context, make_settings
from tests.write.kit import KEY, SID, cli, cli_json, memory_files, settings


def _proposal(tmp_path: Path) -> tuple[Path, str]:
    home = tmp_path / "h"
    settings(home, memory={"review": True})
    ctx = context(home, make_settings(memory={"review": True}))
    ops, rejected = validate_operations({"operations": [{"op": "add", "scope": "project", "name": "deploy-fridays",
                                                         "type": "project", "description": "we deploy on Fridays",
                                                         "body": "Deploys go out on Fridays."}]})  # fmt: skip
    assert not rejected
    pid = memwrite.apply(ctx, KEY, ops, provider="anthropic", session_id=SID).proposal
    assert pid
    return home, pid


def test_a_fifo_as_the_proposed_file_is_refused_without_blocking_accept(tmp_path: Path) -> None:
    home, pid = _proposal(tmp_path)
    f = home / "memd" / "proposals" / pid / "proposed" / "0.md"
    f.unlink()
    os.mkfifo(f)
    r = cli(home, "review", "accept", pid)  # on main: blocks on the FIFO for good
    assert r.returncode == 1 and "a FIFO" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert memory_files(home) == {}


def test_a_symlinked_proposed_file_is_not_read_through(tmp_path: Path) -> None:
    home, pid = _proposal(tmp_path)
    outside = tmp_path / "outside.md"
    outside.write_text("---\nname: planted\ndescription: from outside\ntype: project\n---\nplanted\n")
    f = home / "memd" / "proposals" / pid / "proposed" / "0.md"
    f.unlink()
    f.symlink_to(outside)
    r = cli(home, "review", "accept", pid)
    assert r.returncode == 1 and "symlink" in r.stderr, r.stderr
    assert memory_files(home) == {}


def test_an_unparseable_proposal_json_is_listed_as_damaged_and_can_be_dropped(tmp_path: Path) -> None:
    home, pid = _proposal(tmp_path)
    (home / "memd" / "proposals" / pid / proposals.INFO).write_text("{not json")
    r = cli(home, "review")
    assert r.returncode == 0 and pid in r.stdout and "damaged" in r.stdout, r.stdout
    assert cli_json(home, "review") == [{"id": pid, "damaged": cli_json(home, "review")[0]["damaged"]}]
    assert cli(home, "review", "reject", pid).returncode == 0
    assert cli_json(home, "review") == []
    assert not (home / "memd" / "proposals" / pid).exists()
