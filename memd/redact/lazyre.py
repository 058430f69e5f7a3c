"""Regular expressions compiled at their first use, not at import.

The redaction modules hold about sixty module-level patterns (contexts, vetting, words, views). Every
command that logs imports them for its first log event, yet a process uses a few: the rules whose
keywords or literals occur in what it redacts. Compiling all of them at import cost about a third of the
redactor's import (a run-now's log events need a handful). `lazy` stands in for `re.compile` at module
level; the pattern compiles when one of its methods is first asked for.

Invariant: a `LazyPattern` answers as the compiled pattern through its methods and attributes (`search`,
`match`, `fullmatch`, `finditer`, `findall`, `sub`, `subn`, `split`, `groupindex`, `groups`, `pattern`);
after the first use each method is the compiled pattern's own bound method, held on the instance, so a
call costs what a call on the compiled pattern costs. Two threads meeting a pattern first both compile it
and keep the same answers (the methods of equal patterns).

Limits (no caller here meets them; the `cast` in `lazy` hides them from mypy): it is not an `re.Pattern`,
so `re.search(p, …)`, `re.compile(p)` and `isinstance(p, re.Pattern)` do not take it, `==` is identity,
and `flags` is the flags given until the first use, the compiled pattern's (with `re.UNICODE`) after.
Use it only for module-level patterns that are called, never handed on.
"""

from __future__ import annotations

import re
from typing import Any, cast

_TAKEN = ("search", "match", "fullmatch", "finditer", "findall", "sub", "subn", "split", "groupindex", "groups")


class LazyPattern:
    """`re.compile(pattern, flags)`, compiled when first used (see the module docstring)."""

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self.flags = flags

    def __getattr__(self, name: str) -> Any:
        """Only for a name the instance does not hold yet: the first use. Compiles, keeps the compiled
        pattern's methods and attributes on the instance, and answers from them."""
        if name.startswith("__"):
            raise AttributeError(name)
        compiled = re.compile(self.pattern, self.flags)
        for taken in _TAKEN:
            self.__dict__[taken] = getattr(compiled, taken)
        self.__dict__["flags"] = compiled.flags  # with the flags the pattern implies (re.UNICODE)
        return getattr(compiled, name)

    def __repr__(self) -> str:
        return f"lazy({self.pattern!r}, {self.flags})"


def lazy(pattern: str, flags: int = 0) -> re.Pattern[str]:
    """A pattern that compiles at its first use; typed as the compiled pattern it stands for."""
    return cast(re.Pattern[str], LazyPattern(pattern, flags))


__all__ = ["LazyPattern", "lazy"]
