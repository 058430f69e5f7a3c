"""The transcript ledger in state.sqlite: what each session holds, read once, and the scans that fill it.

May import: `memd.transcripts` and the shared nouns; never memory files.
"""
