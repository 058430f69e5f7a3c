"""Derived views of memory directories: MEMORY.md and the drawer render, and the FTS5 search database.

Reads memories (`memd.memory`); rebuilt from them at any time, so never the only copy of anything.
"""
