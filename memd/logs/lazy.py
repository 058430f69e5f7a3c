"""A module-level logger that imports structlog on first use, not at import.

Modules that `memd status` and the agent hooks import use it: structlog costs tens of
milliseconds to import, and `logging` (which `memd.logs.events` needs) a few more, and those
commands must start fast. Invariant: importing this module imports nothing.

memd.logs imports structlog through `import_structlog`, which keeps `rich` out of it: `structlog.dev`
imports rich whenever it is installed (it is, through dev tools such as import-linter; 0.05-0.1 s of
CPU here) only to render exceptions in colour, and memd's log lines are rendered by its own pipeline,
the same whether rich is installed or not. It gets asyncio and uuid deferred (`import_deferring`, `DEFERRED`):
structlog imports them for methods memd never calls. `memd.__main__` imports dataclasses the same way. A command sets its logging up (`memd.cli`) before any
other module imports structlog, so the first import, the one that counts, is this one.
"""

from __future__ import annotations

from typing import Any


def import_structlog() -> Any:
    """structlog, imported (once) with `rich` hidden from it and asyncio and uuid deferred; a process that imported rich itself
    keeps it (structlog then finds it, as it would without memd). Thread-safe: a thread that finds
    structlog in `sys.modules` half imported by another waits on the import statement's module lock
    (returning `sys.modules`' entry then handed out a module without its functions yet)."""
    import sys  # noqa: PLC0415 - start-up: this module imports nothing at import

    if "structlog" in sys.modules:  # imported, or being imported by another thread: `import` waits for that one
        import structlog  # noqa: PLC0415 - start-up

        return structlog
    hide = "rich" not in sys.modules
    if hide:
        sys.modules["rich"] = None  # type: ignore[assignment]  # `import rich` raises ImportError: structlog's "not installed"
    try:
        return import_deferring("structlog", DEFERRED)  # the hooks and fast commands never pay for structlog
    finally:
        if hide and sys.modules.get("rich", 0) is None:
            del sys.modules["rich"]


# What structlog imports for what memd never calls: asyncio for its async methods (`structlog.stdlib`,
# `structlog._native`; with ssl, socket and subprocess, 15-20 ms of a command's start-up), uuid (with
# platform) for the deprecated `structlog.threadlocal`'s `wrap_dict`.
DEFERRED = ("asyncio", "uuid")


def import_deferring(module: str, deferred: tuple[str, ...]) -> Any:
    """`import module`, with each of `deferred` not imported yet standing in `sys.modules` meanwhile as a module
    that imports the real one at its first attribute's use (`_deferred`): for what `module` imports at its top
    but uses only in code memd never (or rarely) runs. Once `module` is imported, any `import NAME` gets the
    real module. `module` imported already: it is returned, and nothing is deferred."""
    import importlib  # noqa: PLC0415 - start-up: this module imports nothing at import
    import sys  # noqa: PLC0415 - start-up

    if module in sys.modules:
        return importlib.import_module(module)  # (or being imported by another thread: its module lock waits)
    standing = {name: _deferred(name) for name in deferred if name not in sys.modules}
    sys.modules.update(standing)
    try:
        return importlib.import_module(module)
    finally:
        for name, stand_in in standing.items():
            if sys.modules.get(name) is stand_in:
                del sys.modules[name]


def _deferred(name: str) -> Any:
    """What a module imported by `import_deferring` binds for `import NAME`: a module that imports the real
    one at its first attribute's use. It stands in `sys.modules` only during that import: any later
    `import NAME` gets the real module (and a first use during that import puts the real one there at once)."""
    import importlib  # noqa: PLC0415 - start-up: this module imports nothing at import
    import sys  # noqa: PLC0415 - start-up
    import types  # noqa: PLC0415 - start-up

    class Deferred(types.ModuleType):
        def __getattr__(self, attr: str) -> Any:
            if sys.modules.get(name) is self:
                del sys.modules[name]
            return getattr(importlib.import_module(name), attr)

    return Deferred(name)


class _LazyLogger:
    """Stands for `structlog.get_logger(name)` and gets it when first used."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._logger: Any = None

    def __getattr__(self, attr: str) -> Any:
        if self._logger is None:
            self._logger = import_structlog().get_logger(self._name)
        return getattr(self._logger, attr)


def lazy_logger(name: str) -> Any:
    return _LazyLogger(name)
