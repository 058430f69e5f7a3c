"""THE write path for memory directories and what decides on it: apply, review proposals, control, migrations.

May import: `memd.git`, `memd.history`, `memd.job`, `memd.index`, `memd.memory`, `memd.llm`, `memd.redact` and
the shared nouns. Every memd write to a memory directory goes through `memd.write.apply`.
"""
