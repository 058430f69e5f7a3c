"""Every dataclass of memd and its jobs has a docstring: dataclasses writes one from `inspect.signature`
for a class without, importing inspect (with ast, dis and tokenize) into every command's start-up, which
`memd.__main__` defers (`_dataclasses`). The control: a class without one is found, and made so."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.procs import memd_env

REPO = Path(__file__).resolve().parents[1]


def undocumented(source: str) -> list[str]:
    """The dataclasses of `source` (a module's text) without a docstring."""
    return [
        node.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef)
        and any("dataclass" in ast.unparse(d) for d in node.decorator_list)
        and ast.get_docstring(node) is None
    ]


def test_every_dataclass_has_a_docstring() -> None:
    found = {str(p.relative_to(REPO)): undocumented(p.read_text()) for top in ("memd", "jobs") for p in (REPO / top).rglob("*.py")}
    assert {path: names for path, names in found.items() if names} == {}


def test_the_scan_finds_an_undocumented_dataclass() -> None:
    source = "from dataclasses import dataclass\n@dataclass(frozen=True)\nclass A:\n    x: int\n@dataclass\nclass B:\n    '''b'''\n"
    assert undocumented(source) == ["A"]


def test_dataclasses_deferred_inspect_is_the_real_one_when_used() -> None:
    """After the deferred import a dataclass without a docstring still gets dataclasses' own (inspect then
    imported for real), and `import inspect` is the real module."""
    code = (
        "import sys\n"
        "from memd.__main__ import _dataclasses\n"
        "_dataclasses()\n"
        "assert 'inspect' not in sys.modules and 'dataclasses' in sys.modules\n"
        "from dataclasses import dataclass\n"
        "@dataclass\n"
        "class Point:\n"
        "    x: int\n"
        "import inspect\n"
        "assert inspect.__spec__ is not None and sys.modules['inspect'] is inspect\n"
        "print(Point.__doc__)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=memd_env(), timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "Point(x: int)"
