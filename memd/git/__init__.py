"""The memory repository: every memd write as one commit, its layout and work tree (no remote here).

Called by the writers after their history is durable; imports `memd.history.runs` downwards.
"""
