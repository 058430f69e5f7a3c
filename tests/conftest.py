"""Shared fixtures: a home laid out from the real corpus, and a temporary home."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("MEMD_CORPUS", REPO.parent / "shared" / "corpus" / "claude-code"))


def corpus_sessions() -> list[Path]:
    """Main transcripts of the corpus (sub-agent files excluded)."""
    if not CORPUS.is_dir():
        return []
    return sorted(
        p for p in CORPUS.rglob("*.jsonl") if "subagents" not in p.parts
    )


def require_corpus() -> None:
    if not CORPUS.is_dir():
        pytest.skip(f"corpus folder {CORPUS} is absent (it lives in ../shared beside the clone)")


def lay_out_corpus(home: Path) -> Path:
    """The corpus as a home: each corpus folder becomes one project."""
    require_corpus()
    projects = home / "projects"
    projects.mkdir(parents=True, exist_ok=True)
    for d in sorted(CORPUS.iterdir()):
        if d.is_dir():
            shutil.copytree(d, projects / f"-corpus-{d.name}")
    return home


@pytest.fixture(scope="session")
def corpus_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A read-only-by-convention corpus home shared by tests that only read it."""
    return lay_out_corpus(tmp_path_factory.mktemp("corpus-home"))


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    (h / "projects").mkdir(parents=True)
    return h


def memd_cmd() -> list[str]:
    """The installed `memd` of this interpreter's environment."""
    exe = Path(sys.executable).with_name("memd")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "memd"]
