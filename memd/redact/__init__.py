"""Secret redaction: the rules, their detectors and the vetting of a match.

Imports nothing of memd but the shared nouns: everything that writes or logs text calls it.
"""
