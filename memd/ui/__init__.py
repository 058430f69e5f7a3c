"""`memd ui`: a local web page for what memd knows, did and cost (SPEC §16).

Served by starlette under uvicorn on 127.0.0.1 only, behind a random token (`memd.ui.guard`);
pages are rendered on the server with the standard library (`memd.ui.pages`), the cost chart is
an inline SVG drawn there too, and every change goes through memd's one write path
(`memd.ui.actions`), the functions `memd review`, `memd undo` and `memd edit` call.

Importing this package imports nothing heavy: starlette and uvicorn load in `memd.ui.app` and
`memd.ui.serve` only, so `memd cost` (which uses `memd.ui.cost`) stays light, and neither
`memd status` nor the hooks import any of it (tests/ui/test_cost.py checks).

May import: any package below `cli` (the daemon's status, the write path, history, the ledger).
"""
