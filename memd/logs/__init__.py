"""memd's structured logs: events, the rotated log file, and reading it back.

Imports only the shared nouns and `memd.redact.redactor` (every line is redacted).
"""
