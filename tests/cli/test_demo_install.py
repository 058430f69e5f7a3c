"""`memd demo` from a normal install (issue 24 pt 6): a wheel built from the source, installed
(not editable) into a fresh virtual environment, runs the demo: the sample home came as package
data, a dream merges two memories and is undone, and the hints spell the command as it can be
run there (memd is not on PATH). Also the clone's own first command, and how hints are spelled."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from memd.cli.demo import SAMPLE, runnable
from tests.procs import memd_env

REPO = Path(__file__).resolve().parents[2]


def _source_copy(dest: Path) -> Path:
    """The source tree without the environments and caches: the build writes nothing into the worktree."""
    skip = shutil.ignore_patterns(".venv*", ".git", "build", "dist", "*.egg-info", "__pycache__", ".mypy_cache",
                                  ".ruff_cache", ".pytest_cache", "tests", "bench", "sample-home")  # fmt: skip
    shutil.copytree(REPO, dest, ignore=skip, symlinks=True)
    return dest


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = _source_copy(tmp_path_factory.mktemp("src") / "memd")  # built in isolation: setuptools from pip's index or cache
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                        "-w", str(out), str(src)], capture_output=True, text=True, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr
    (whl,) = out.glob("memd-*.whl")
    return whl


@pytest.mark.slow
def test_the_wheel_holds_every_file_of_the_sample_home(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    want = {f"memd/sample_home/{p.relative_to(SAMPLE).as_posix()}" for p in SAMPLE.rglob("*") if p.is_file()}
    assert want and want <= names, sorted(want - names)


@pytest.mark.slow
def test_demo_from_a_wheel_installed_in_a_fresh_venv(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    site = next((env_dir / "lib").glob("python3*/site-packages"))
    # memd's dependencies from this environment's site-packages (a path, not a site dir: its
    # editable memd finder is not loaded), so nothing is downloaded and only the wheel is memd.
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(env_dir / "bin" / "python"), "install", "-q",
                        "--no-deps", "--no-index", str(wheel)], capture_output=True, text=True, timeout=600)  # fmt: skip
    if r.returncode != 0 and "no such option: --python" in r.stderr:  # pip < 22.3
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target",
                            str(site), str(wheel)], capture_output=True, text=True, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr
    memd = env_dir / "bin" / "memd"
    assert memd.exists()
    where = subprocess.run([str(env_dir / "bin" / "python"), "-c", "import memd; print(memd.__file__)"],
                           capture_output=True, text=True, check=True, cwd=tmp_path).stdout.strip()  # fmt: skip
    assert where.startswith(str(site)), where  # the installed wheel, not the worktree
    env = memd_env(PATH=os.defpath)  # no memd on PATH
    work = tmp_path / "work"
    work.mkdir()
    r = subprocess.run([str(memd), "demo"], cwd=work, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "bundled sample is missing" not in r.stdout + r.stderr
    assert "ingested 4 sessions" in r.stdout
    assert "1 merged" in r.stdout and "merged   never-commit-to-main, pr-for-every-change" in r.stdout
    assert "brought back pr-for-every-change.md" in r.stdout  # the undo
    assert (work / "sample-home" / "memory" / "pr-for-every-change.md").exists()  # undone: both are back
    hint = f"{memd} --home sample-home search tests"
    assert hint in r.stdout, r.stdout  # the path that runs it, memd not being on PATH
    assert "\n  memd --home" not in r.stdout


def test_hints_spell_the_command_as_the_user_can_run_it(tmp_path: Path) -> None:
    script = tmp_path / ".venv" / "bin" / "memd"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    other = tmp_path / "elsewhere" / "memd"
    other.parent.mkdir()
    other.write_text("#!/bin/sh\n")
    assert runnable(str(script), None, tmp_path, "/usr/bin/python3") == ".venv/bin/memd"
    assert runnable(".venv/bin/memd", None, tmp_path, "/usr/bin/python3") == ".venv/bin/memd"
    assert runnable(str(script), str(script), tmp_path, "/usr/bin/python3") == "memd"  # the one on PATH
    assert runnable(str(script), str(other), tmp_path, "/usr/bin/python3") == ".venv/bin/memd"  # PATH has another
    assert runnable(str(script), None, tmp_path / "elsewhere", "/x/python") == str(script)
    assert runnable("/x/lib/memd/__main__.py", None, tmp_path, "/x/bin/python3") == "/x/bin/python3 -m memd"
    assert runnable("/x/lib/memd/__main__.py", "/usr/bin/memd", tmp_path, "/x/bin/python3") == "memd"


def test_the_clone_demo_shows_a_dream_and_its_undo(tmp_path: Path) -> None:
    """The README's first command's `memd demo`, from this (editable) install, run twice in one directory."""
    exe = Path(sys.executable).with_name("memd")
    for _ in range(2):
        r = subprocess.run([str(exe), "demo"], cwd=tmp_path, capture_output=True, text=True, env=memd_env(), timeout=300)
        assert r.returncode == 0, r.stderr
    assert "1 merged" in r.stdout and "restored as before" in r.stdout
    assert "nothing to change" not in r.stdout
