"""Secret redaction: the rules, their detectors and the vetting of a match.

May import: nothing of memd. Everything that stores, logs, commits or sends text calls it.
"""
