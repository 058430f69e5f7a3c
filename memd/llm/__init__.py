"""The model layer: every model call, its types, retries, deadline and the API key file.

Imports only the shared nouns and `memd.logs.events`, `memd.redact.redactor`.
"""
