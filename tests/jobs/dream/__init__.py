"""Dream (issue 7): due-ness, the model and offline plans, guardrails, the atomic swap, history and undo.

Real parts throughout: memory files on disk, the state database, the ledger
ingesting real transcript files, jobs run through `memd.job.runner.run_job` (locks,
run records), the model path through the real `anthropic` client to the local
fake Messages API, concurrency and crashes with real processes and `kill -9`.
"""
