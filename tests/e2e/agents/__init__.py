"""Ground truth from real coding agents (Claude Code) run against tests/fakeapi.py."""
