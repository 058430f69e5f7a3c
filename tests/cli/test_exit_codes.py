"""One error tree: memd/errors.py holds one class per row of the README's exit-code table,
every library error that exits with a code derives from one of them, and the CLI maps
them (and nothing duck-typed) to `memd: <message>` and the code."""

from __future__ import annotations

import inspect
import re
import sqlite3
import subprocess
from pathlib import Path

import pytest

from memd import errors, locks, state
from memd.cli import handles_errors
from memd.daemon import lock as daemonlock
from memd.daemon import service
from memd.history import runs as history
from memd.history import treecopy
from memd.llm import types as llmtypes
from memd.memory import answer as opsparse
from memd.memory.answer import ModelOutputError
from tests.conftest import memd_cmd
from tests.procs import memd_env

README = Path(__file__).resolve().parents[2] / "README.md"


def _label(meaning: str) -> str:
    """A row's meaning up to its explanation: "usage (bad arguments, …)" → "usage"."""
    m = re.match(r"[^(:]+", meaning)
    assert m is not None, meaning
    return m.group(0).strip()


def readme_rows() -> list[tuple[int, str]]:
    section = README.read_text(encoding="utf-8").split("\n## Exit codes\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\|\s*(\d+)\s*\|\s*(.+?)\s*\|\s*$", section, re.MULTILINE)
    assert rows, "no table under README's ## Exit codes"
    return [(int(code), _label(meaning)) for code, meaning in rows]


def error_rows() -> list[tuple[int, str]]:
    """(code, label) of each class of memd/errors.py; the label opens its docstring."""
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass)
               if issubclass(c, errors.MemdError) and c.__module__ == errors.__name__]  # fmt: skip
    return sorted((c.exit_code, (c.__doc__ or "").split(":", 1)[0]) for c in classes)


def test_errors_match_the_readme_table_row_for_row() -> None:
    assert readme_rows() == [(0, "ok"), *error_rows()]


def test_the_codes_are_distinct() -> None:
    codes = [code for code, _ in error_rows()]
    assert len(codes) == len(set(codes))


def test_help_states_the_same_codes() -> None:
    r = subprocess.run([*memd_cmd(), "--help"], check=False, capture_output=True, text=True, env=memd_env(), timeout=60)
    text = " ".join(r.stdout.split())
    m = re.search(r"Exit codes: (.+?)\.(?: |$)", text)
    assert m is not None, r.stdout
    stated = []
    for item in re.sub(r"\([^)]*\)", "", m.group(1)).split(","):
        code, _, label = item.strip().partition(" ")
        stated.append((int(code), label.strip()))
    assert stated == readme_rows()


def _library_errors() -> list[tuple[type[BaseException], type[errors.MemdError]]]:
    return [
        (history.HistoryError, errors.UsageError),
        (service.ServiceError, errors.MemdError),
        (service.UnsupportedPlatform, errors.MemdError),
        (llmtypes.ModelError, errors.ModelAPIError),
        (llmtypes.ModelUnavailable, errors.ModelAPIError),
        (llmtypes.BudgetExceeded, errors.ModelAPIError),
        (llmtypes.ModelCallFailed, errors.ModelAPIError),
        (locks.LockError, errors.MemdError),
        (locks.UnsafeLockPath, errors.MemdError),
        (locks.LockBusy, errors.BusyError),
        (daemonlock.AlreadyRunning, errors.AlreadyRunningError),
        (state.StateError, errors.MemdError),
        (opsparse.ModelOutputError, errors.ModelAPIError),
    ]


@pytest.mark.parametrize("cls,row", _library_errors(), ids=lambda c: c.__name__)
def test_library_errors_derive_from_their_row(cls: type[BaseException], row: type[errors.MemdError]) -> None:
    assert issubclass(cls, row)
    assert cls.exit_code == row.exit_code  # type: ignore[attr-defined]
    assert "exit_code" not in vars(cls)  # the row's code, not a second copy


def test_mixed_in_errors_keep_their_builtin_base() -> None:
    assert issubclass(opsparse.ModelOutputError, ValueError)  # `except ValueError` still catches it
    assert issubclass(treecopy.SpecialFile, OSError) and not issubclass(treecopy.SpecialFile, errors.MemdError)
    assert issubclass(locks.LockBusy, locks.LockError) and issubclass(daemonlock.AlreadyRunning, locks.LockError)


def _run(exc: BaseException) -> int:
    @handles_errors
    def cmd() -> None:
        raise exc

    with pytest.raises(SystemExit) as out:
        cmd()
    return int(out.value.code or 0)


def test_the_cli_prints_one_line_and_the_code(capsys: pytest.CaptureFixture[str]) -> None:
    for cls in (errors.MemdError, errors.UsageError, errors.AlreadyRunningError, errors.ModelAPIError,
                errors.ConfigError, errors.BusyError):  # fmt: skip
        assert _run(cls("it went wrong")) == cls.exit_code
        assert capsys.readouterr().err == "memd: it went wrong\n"

    assert _run(ModelOutputError("not JSON")) == 4
    assert capsys.readouterr().err == "memd: not JSON\n"


def test_a_locked_database_is_busy(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(sqlite3.OperationalError("database is locked")) == 75
    assert capsys.readouterr().err.startswith("memd: a memd database is locked by another process")
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        _run(sqlite3.OperationalError("no such table: x"))


def test_an_exit_code_attribute_alone_is_not_an_expected_error() -> None:
    class Odd(Exception):
        exit_code = 9

    with pytest.raises(Odd):
        _run(Odd("a bug keeps its traceback"))
