"""A module-level logger that imports structlog on first use, not at import.

Modules that `memd status` and the agent hooks import use it: structlog costs tens of
milliseconds to import, and `logging` (which `memd.logs.events` needs) a few more, and those
commands must start fast. Invariant: importing this module imports nothing.
"""

from __future__ import annotations

from typing import Any


class _LazyLogger:
    """Stands for `structlog.get_logger(name)` and gets it when first used."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._logger: Any = None

    def __getattr__(self, attr: str) -> Any:
        if self._logger is None:
            import structlog  # noqa: PLC0415 - start-up: the hooks and fast commands never pay for structlog

            self._logger = structlog.get_logger(self._name)
        return getattr(self._logger, attr)


def lazy_logger(name: str) -> Any:
    return _LazyLogger(name)
