"""Every change memd made: the files a write changed, dream snapshots and swaps, undo, provenance.

May import: `memd.index`, `memd.memory`, `memd.transcripts`, `memd.logs`, `memd.redact` and the shared nouns.
Never calls git: the writers above call `memd.git.commits.after_run` once their run is durable.
"""
