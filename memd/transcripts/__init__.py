"""Reading agent transcripts: formats, complete lines, typed records, the fold and its counters, spans.

No SQLite and no model here: what a transcript says, decided from its bytes alone.
"""
