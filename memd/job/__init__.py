"""The job contract (`Job`, `JobContext`, `RunResult`) and the runner of one job under its locks.

May import: `memd.llm` and the shared nouns. Knows no job by name: `memd.daemon.registry` lists them.
"""
