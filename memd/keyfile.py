"""The API key for a service that does not inherit the user's shell environment.

systemd and launchd start memd without `ANTHROPIC_API_KEY`. Rather than put the
key in a unit file (world-readable directories, copied around), memd reads
`$DEEPCODE_HOME/memd/anthropic.key` when the variable is unset. The file must be
private (no group or other bits): a readable key file is refused, loudly.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

KEY_FILE = "anthropic.key"


def key_path(memd_dir: Path) -> Path:
    return memd_dir / KEY_FILE


def load_key(memd_dir: Path, env: dict[str, str] | None = None) -> tuple[str | None, str | None]:
    """(key, problem): the environment's key first, else the private key file's."""
    env = dict(os.environ) if env is None else env
    if env.get("ANTHROPIC_API_KEY"):
        return env["ANTHROPIC_API_KEY"], None
    path = key_path(memd_dir)
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"{path}: cannot read ({exc.strerror})"
    if not stat.S_ISREG(st.st_mode):
        return None, f"{path}: not a regular file; ignored"
    if st.st_mode & 0o077:
        return None, f"{path}: readable by others (mode {stat.S_IMODE(st.st_mode):04o}); chmod 600 it; ignored"
    try:
        key = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"{path}: cannot read ({exc})"
    return (key or None), (None if key else f"{path}: empty")
