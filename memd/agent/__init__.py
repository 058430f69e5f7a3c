"""What reaches the agent: the context at session start, recall, hooks, the MCP server, connect.

May import: `memd.write`, `memd.index`, `memd.job`, `memd.memory`, `memd.llm`, `memd.logs` and the shared nouns.
The hook paths and the MCP server import lazily: their start-up time is what the user waits for.
"""
