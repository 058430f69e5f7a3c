"""The lazy command table of `memd.cli` says exactly what the modules of the package register."""

from __future__ import annotations

import importlib
import pkgutil
import re
import subprocess
import sys

from memd import cli
from tests.conftest import memd_cmd
from tests.procs import memd_env


def _modules() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(cli.__path__))


def _registered() -> dict[str, str]:
    """command name → the module that registered it, after importing every module of memd.cli."""
    for name in _modules():
        importlib.import_module(f"memd.cli.{name}")
    out = {}
    for name, cmd in cli.main.commands.items():
        assert cmd.callback is not None
        out[name] = cmd.callback.__module__
    return out


def test_the_table_names_the_module_that_registers_each_command() -> None:
    registered = _registered()
    assert set(registered) == set(cli.COMMAND_MODULES)
    assert registered == {name: f"memd.cli.{module}" for name, module in cli.COMMAND_MODULES.items()}


def test_every_module_of_the_package_declares_commands() -> None:
    assert set(cli.COMMAND_MODULES.values()) == set(_modules())


def test_fast_commands_are_commands() -> None:
    assert cli.FAST_COMMANDS - {None} <= set(cli.COMMAND_MODULES)


def test_help_lists_exactly_the_table() -> None:
    r = subprocess.run([*memd_cmd(), "--help"], check=False, capture_output=True, text=True, env=memd_env(), timeout=60)
    assert r.returncode == 0, r.stderr
    listed = re.findall(r"^  (\S+)", r.stdout.split("\nCommands:\n", 1)[1], re.MULTILINE)
    assert listed == sorted(cli.COMMAND_MODULES)


def test_a_command_imports_only_its_own_module() -> None:
    """`memd key` (a hook command) and `import memd.cli` load no other command module."""
    code = (
        "import sys\n"
        "import memd.cli\n"
        "print(sorted(m for m in sys.modules if m.startswith('memd.cli.')))\n"
        "try:\n"
        "    memd.cli.main(['key', '.'], prog_name='memd')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('memd.cli.')))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, env=memd_env(), timeout=60)
    assert r.returncode == 0, r.stderr
    before, _key, after = r.stdout.splitlines()
    assert before == "[]"
    assert after == "['memd.cli.config']"
