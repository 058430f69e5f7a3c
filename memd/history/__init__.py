"""Every change memd made: the files a write changed, dream snapshots and swaps, undo, provenance.

Never calls git: the writers above call `memd.git` after they commit.
"""
