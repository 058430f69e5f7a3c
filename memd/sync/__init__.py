"""Memory on several machines: fetch, merge and push the memory repository; export and import.

May import: `memd.write`, `memd.git`, `memd.job`, `memd.memory`, `memd.logs` and the shared nouns.
"""
