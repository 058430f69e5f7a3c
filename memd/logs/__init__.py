"""memd's structured logs: events, the rotated log file, and reading it back.

May import: `memd.redact` (every line is redacted) and the shared nouns.
"""
