"""The list of jobs: the one place `memd` imports from `jobs/`.

Only real jobs are listed. Modules are imported on first use so that commands
which never run a job (`memd --help`, `memd key`) do not pay for them. Each is
checked by mypy against the job contract, `memd.job.context.Job`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, cast

from memd.errors import UsageError

if TYPE_CHECKING:
    import jobs.dream
    import jobs.extract
    import jobs.index
    import jobs.summary
    import jobs.sync
    from memd.job.context import Job

    _CHECKED: tuple[Job, ...] = (jobs.extract, jobs.summary, jobs.dream, jobs.index, jobs.sync)

JOB_NAMES: tuple[str, ...] = ("extract", "summary", "dream", "index", "sync")


def get(name: str) -> Job:
    if name not in JOB_NAMES:
        raise UsageError(f"unknown job {name!r} (jobs: {', '.join(JOB_NAMES)})")
    return cast("Job", importlib.import_module(f"jobs.{name}"))


def all_jobs() -> list[Job]:
    return [get(n) for n in JOB_NAMES]
