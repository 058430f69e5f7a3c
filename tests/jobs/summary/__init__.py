"""The session summary job (SPEC §4), one module of tests per module of `jobs.summary`."""
