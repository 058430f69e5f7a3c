"""Issue 8, "Under faults": crash loops, concurrency, fuzzing, hostile input, permissions."""
