"""`memd run` and what sits beside it: the loop, its lock, dispatch, the job registry, status, the service.

May import: any package below it. The registry is the one module of memd that imports `jobs/`.
"""
