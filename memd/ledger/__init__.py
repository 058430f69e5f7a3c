"""The transcript ledger in state.sqlite: what each session holds, read once, and the scans that fill it.

Imports `memd.transcripts.formats` and the shared nouns; never memory files.
"""
