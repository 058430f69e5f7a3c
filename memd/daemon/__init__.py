"""`memd run` and what sits beside it: the loop, its lock, dispatch, the job registry, status, the service.

The top floor: the registry is the one module of memd that imports `jobs/`.
"""
