"""`memd cost` and the 7-day line of `memd status`: the figures of memd/llm/usage.py at the dated price
table; and neither `memd status` nor a hook imports the page's stack."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memd.llm.prices import AS_OF, PriceTable
from tests.conftest import memd_cmd
from tests.procs import memd_env
from tests.ui.world import USAGE, build, today


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    h = tmp_path_factory.mktemp("cost") / "home"
    build(h, today())
    return h


def _memd(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*memd_cmd(), "--home", str(home), *args], capture_output=True, text=True, env=memd_env(),
                          timeout=120, check=False)  # fmt: skip


def test_cost_json_counts_every_call_per_day_and_job_at_the_dated_table(home: Path) -> None:
    r = _memd(home, "cost", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["days"] == 30 and len(data["by_day"]) == 30 and data["to"] == today().isoformat()
    assert data["prices"] == {"as_of": AS_OF, "source": "built-in", "problem": None}
    rows = [row for rows in USAGE.values() for row in rows]
    t = PriceTable()
    assert data["total"]["calls"] == len(rows)
    assert data["total"]["tokens"] == sum(i + o for _j, _m, i, o in rows)
    assert data["total"]["cost_usd"] == pytest.approx(sum(t.cost(m, i, o) or 0 for _j, m, i, o in rows), abs=1e-6)
    assert data["by_job"]["extract"]["calls"] == 2 and data["by_job"]["dream"]["input_tokens"] == 30_000
    used = {d["day"] for d in data["by_day"] if d["calls"]}
    assert len(used) == len(USAGE)
    week = json.loads(_memd(home, "cost", "--days", "7", "--json").stdout)
    assert week["total"]["calls"] == sum(len(v) for k, v in USAGE.items() if k < 7)


def test_cost_text_and_bad_days(home: Path) -> None:
    r = _memd(home, "cost")
    assert r.returncode == 0, r.stderr
    assert f"prices as of {AS_OF} (built-in)" in r.stdout and "\ntotal " in r.stdout and "dream" in r.stdout
    assert "$" in r.stdout
    bad = _memd(home, "cost", "--days", "0")
    assert bad.returncode == 2 and "--days" in bad.stderr


def test_status_shows_the_last_seven_days_in_one_line(home: Path) -> None:
    r = _memd(home, "status")
    assert r.returncode == 0, r.stderr
    (line,) = [ln for ln in r.stdout.splitlines() if ln.startswith("model last 7 days:")]
    calls = sum(len(v) for k, v in USAGE.items() if k < 7)
    assert f"{calls} calls" in line and f"prices of {AS_OF}" in line and "$" in line
    data = json.loads(_memd(home, "status", "--json").stdout)
    assert data["model"]["last_7_days"]["calls"] == calls


@pytest.mark.parametrize("argv", [["status"], ["status", "--json"], ["context", "--hook"]])
def test_status_and_hooks_import_nothing_of_the_page(home: Path, argv: list[str]) -> None:
    """The modules a command loads, listed after it ran in a fresh interpreter."""
    code = ("import sys\nfrom memd.cli import main\ntry:\n    main(sys.argv[1:], prog_name='memd')\n"
            "except SystemExit:\n    pass\nsys.stderr.write('MODULES ' + ' '.join(sorted(sys.modules)) + '\\n')\n")  # fmt: skip
    r = subprocess.run([sys.executable, "-c", code, "--home", str(home), *argv], input="{}", capture_output=True,
                       text=True, env=memd_env(), timeout=120, check=False)  # fmt: skip
    mods = r.stderr.rsplit("MODULES ", 1)[1].split()
    heavy = [m for m in mods if m.split(".")[0] in ("starlette", "uvicorn", "anyio", "playwright")
             or m.startswith("memd.ui") or m == "memd.cli.cost"]  # fmt: skip
    assert heavy == [], heavy
    if argv[0] == "status":
        assert "memd.llm.usage" in mods and "memd.llm.prices" in mods
