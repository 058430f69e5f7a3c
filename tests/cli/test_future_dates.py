"""A memory dated in 2100 (issue 23): `memd show` says it is dated in the future instead of a bare "0 min"."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

from memd.memory.file import render_memory
from tests.procs import memd_env, run_memd


def test_a_memory_dated_in_2100_is_shown_with_a_warning_not_a_bare_zero_age(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "memory").mkdir(parents=True)
    (home / "settings.json").write_text(json.dumps({"memd": {"provider": "offline"}}))
    p = home / "memory" / "tabs.md"
    p.write_text(render_memory("tabs", "the user indents with tabs", "user", "Tabs.", {}))
    t = datetime(2100, 1, 1, tzinfo=UTC).timestamp()
    os.utime(p, (t, t))
    r = run_memd(home, "show", "tabs", env=memd_env())
    assert r.returncode == 0, r.stderr
    assert "dated in the future (2100-01-01" in r.stdout, r.stdout
    r = run_memd(home, "show", "tabs", "--json", env=memd_env())
    data = json.loads(r.stdout)
    assert data["future_dated"] is True and data["age_seconds"] == 0
