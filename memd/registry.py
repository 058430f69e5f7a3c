"""The list of jobs: the one place `memd` imports from `jobs/`.

Only real jobs are listed. Modules are imported on first use so that commands
which never run a job (`memd --help`, `memd key`) do not pay for them.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from memd.errors import UsageError

JOB_NAMES: tuple[str, ...] = ("extract", "summary", "dream", "index")


def get(name: str) -> ModuleType:
    if name not in JOB_NAMES:
        raise UsageError(f"unknown job {name!r} (jobs: {', '.join(JOB_NAMES)})")
    return importlib.import_module(f"jobs.{name}")


def all_jobs() -> list[ModuleType]:
    return [get(n) for n in JOB_NAMES]
