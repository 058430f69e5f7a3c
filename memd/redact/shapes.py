"""Whether a word is shaped like a key or a password rather than a word: for what must never carry one.

The rules of `memd.redact.rules` know formats and contexts; a secret in neither (`xq7pl9mz2vkw` said
after a word no rule knows) passes them. Redacted text may still carry it, but nothing *derived* from
text may: a memory's name and file name, an index line, a commit subject that is pushed. Those ask
this predicate of every word and drop the words it flags (`memd.memory.names.token_like`,
`memd.git.plumbing.message`). Pure and cheap; no real name needs such a word.

A run of letters and digits is token-shaped when it is
- 30 characters or more, or 12 digits or more;
- 16 characters or more mixing letters and digits;
- 10 characters or more where letters and digits alternate at least three times (`xq7pl9mz2vkw`,
  `a1b2c3d4e5`), which words, versions and names (`ubuntu2204`, `python311`, `v2beta1`, `sha256sum`)
  do not, and a short id (`s029f02b4`, a git short hash) is too short for;
- 10 characters or more of letters whose case changes inside at least three times, with lower-case
  runs shorter than camelCase's words (`qZxvTbnmKpLw`, not `refreshAccessTokenIfExpired`).
"""

from __future__ import annotations

from memd.redact.lazyre import lazy

__all__ = ["has_token", "is_token_shaped", "mask_tokens"]

_RUN = lazy(r"[A-Za-z0-9]+")
_LOWER_RUN = lazy(r"[a-z]+")


def is_token_shaped(run: str) -> bool:
    """Whether one run of ASCII letters and digits looks like a key or a password (see the module)."""
    n = len(run)
    if n < 8:
        return False
    if n >= 30 or (n >= 12 and run.isdigit()):
        return True
    digits = sum(c.isdigit() for c in run)
    if digits and digits < n:
        if n >= 16:
            return True
        switches = sum(1 for a, b in zip(run, run[1:], strict=False) if a.isdigit() != b.isdigit())
        if n >= 10 and switches >= 3:
            return True
    if not digits and n >= 10:
        humps = sum(1 for a, b in zip(run, run[1:], strict=False) if a.islower() and b.isupper())
        lower_runs = len(_LOWER_RUN.findall(run))
        return humps >= 3 and sum(c.islower() for c in run) < 3 * lower_runs
    return False


def has_token(text: str) -> bool:
    """Whether any run of letters and digits in `text` is token-shaped."""
    return any(is_token_shaped(run) for run in _RUN.findall(text))


def mask_tokens(text: str, mask: str = "…") -> str:
    """`text` with every token-shaped run replaced by `mask` (a commit subject, a log line's name)."""
    return _RUN.sub(lambda m: mask if is_token_shaped(m.group(0)) else m.group(0), text)
