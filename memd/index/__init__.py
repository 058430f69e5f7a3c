"""Derived views of memory directories: MEMORY.md and the drawer render, and the FTS5 search database.

May import: `memd.memory`, `memd.logs` and the shared nouns. Rebuilt from the memories at any time, so never the
only copy of anything.
"""
