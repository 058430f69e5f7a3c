"""One memory file and a directory of them: names, parsing, scanning, checks, model answers and operations.

Nouns and validation only: nothing here writes a memory directory (that is `memd.write`).
"""
