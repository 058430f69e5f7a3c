"""One memory file and a directory of them: names, parsing, scanning, checks, model answers, operations.

May import: `memd.logs`, `memd.redact` and the shared nouns. Nouns and validation only: nothing here writes a
memory directory (that is `memd.write`); `names` is the one home of what a memory file may be called.
"""
