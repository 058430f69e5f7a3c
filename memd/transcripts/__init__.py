"""Reading agent transcripts: formats, complete lines, typed records, the fold and its counters, spans.

May import: the shared nouns only. No SQLite, no model, no memory files: what a transcript says, decided from its bytes.
"""
