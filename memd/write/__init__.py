"""THE write path for memory directories and what decides on it: apply, review proposals, control, migrations.

Every memd write to a memory directory goes through `memd.write.apply`.
"""
