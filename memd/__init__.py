"""memd: keeps a coding agent's long-term memory in shape in the background."""

__version__ = "0.1.0"
