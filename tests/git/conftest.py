from __future__ import annotations

from tests.sync.conftest import git_identity

__all__ = ["git_identity"]  # the same git identity as the sync tests: never the machine's configuration
