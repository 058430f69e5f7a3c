"""What reaches the agent: the context at session start, recall, hooks, the MCP server, connect.

The hook paths import lazily: their start-up time is what the user waits for.
"""
