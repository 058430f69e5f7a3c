"""The memory repository: every memd write as one commit, its layout and its work tree (no remote here).

May import: `memd.history` (downwards), `memd.index`, `memd.logs`, `memd.redact` and the shared nouns. Called by
the writers after their history run is durable; never raises into a write.
"""
