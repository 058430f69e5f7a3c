"""The job contract (`Job`, `JobContext`, `RunResult`) and the runner of one job under its locks.

Knows no job by name: `memd.daemon.loop.registry` lists them.
"""
