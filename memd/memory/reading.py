"""How a model is to read memories: the one sentence memd puts before the model wherever it shows
memories (the drawer render, the session-start block, recall's output), so the three never drift.

No imports: the hooks' start-up path loads this module.
"""

FULL_TEXT_RULE = "Read a memory's file before answering from it; never conclude from a snippet alone."
