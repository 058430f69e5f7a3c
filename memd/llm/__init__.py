"""The model layer: every model call, its types, its retries and its deadline.

May import: `memd.redact` and the shared nouns.
"""
