"""memd: keeps a coding agent's long-term memory in shape in the background.

The house, top floor first; a package imports only what stands below it (the import-linter
contract in pyproject.toml holds it so, function-local imports included):

    cli                       the one `memd` command
    daemon                    `memd run`, dispatch, the job registry (the one import of jobs/), status, service
    agent                     what reaches the agent: context, recall, hooks, MCP, connect
    sync                      memory on several machines
    write                     the one write path, review, control, migrations
    git                       the memory repository (called by the writers after they commit)
    history                   every change memd made, undo, provenance
    job                       the job contract and the runner
    index                     MEMORY.md, the drawer render, search
    memory                    memory files: names, parsing, scanning, checks, operations
    ledger                    the transcript ledger and the scans that fill it
    llm, logs, redact         model calls, structured logs, secret redaction
    transcripts               reading agent transcripts
    settings state locks discovery keyfile keys tree fsutil errors clock   the shared nouns (flat)
"""

__version__ = "0.1.0"
