"""`memd.redact.lazyre`: the redaction modules' patterns compile at their first use, not at import, and a lazy
pattern answers as the compiled one."""

from __future__ import annotations

import re
import subprocess
import sys
import threading

from memd.redact.lazyre import LazyPattern, lazy

_COUNT = """
import re, sys
import memd.logs.events  # what a logging command holds before its first event (logging, structlog)
compiled = []
real = re._compile
def counted(pattern, flags):
    if not isinstance(pattern, re.Pattern):
        compiled.append(pattern)
    return real(pattern, flags)
re._compile = counted
import memd.redact.redactor as r
print(len(compiled))
r.redact(sys.argv[1])
print(len(compiled))
"""


def test_the_redactor_compiles_a_few_patterns_at_import_and_the_rules_an_event_needs_after() -> None:
    r = subprocess.run([sys.executable, "-c", _COUNT, "job index target project:-p000 run 6d3bd5ef47a0"],
                       capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    at_import, after = map(int, r.stdout.split())
    assert at_import <= 3  # those `rule()` and `token()` read while the rule table is built
    assert after < 30  # of about 60 module-level patterns and 150 token formats


def test_a_lazy_pattern_answers_as_the_compiled_one() -> None:
    text = "Key: abc123, key: XYZ, kEy"
    for pattern, flags in ((r"(?P<k>key): (?P<v>\w+)", re.IGNORECASE), (r"\d+", 0), (r"(x)|(y)", 0)):
        want, got = re.compile(pattern, flags), lazy(pattern, flags)
        assert (got.pattern, got.flags & ~re.UNICODE) == (want.pattern, want.flags & ~re.UNICODE)
        assert [m.span() for m in got.finditer(text)] == [m.span() for m in want.finditer(text)]
        g, w = got.search(text, 3), want.search(text, 3)
        assert (g and (g.span(), g.groups())) == (w and (w.span(), w.groups()))
        assert got.findall(text) == want.findall(text) and got.sub("-", text) == want.sub("-", text)
        assert got.subn("-", text) == want.subn("-", text) and got.split(text) == want.split(text)
        assert (got.groups, dict(got.groupindex), got.flags) == (want.groups, dict(want.groupindex), want.flags)
        assert bool(got.match(text)) == bool(want.match(text)) and bool(got.fullmatch("123")) == bool(want.fullmatch("123"))


def test_a_lazy_pattern_compiles_once_at_its_first_use_and_keeps_the_methods() -> None:
    p = LazyPattern(r"a+b")
    assert "search" not in vars(p)
    first = p.search("xaab")
    assert first is not None and first.span() == (1, 4)
    assert vars(p)["search"].__self__ is vars(p)["match"].__self__  # one compiled pattern behind them all
    assert isinstance(vars(p)["search"].__self__, re.Pattern)


def test_threads_meeting_a_lazy_pattern_first_get_the_same_answers() -> None:
    p = LazyPattern(r"(\w+)@(\w+)")
    start, got = threading.Barrier(8), []

    def use() -> None:
        start.wait()
        got.append([m.groups() for m in p.finditer("a@b c@d")])

    threads = [threading.Thread(target=use) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [[("a", "b"), ("c", "d")]] * 8
