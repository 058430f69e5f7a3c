"""Memory on several machines: fetch, merge and push the memory repository; export and import.

Imports `memd.git` and `memd.write`; nothing below imports it.
"""
