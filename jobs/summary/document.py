"""The summary document (SPEC §4): its fixed sections, parsed, rendered and bounded (pure).

Model output is untrusted: it is parsed into the known sections, unknown
headings are dropped, missing sections come from the previous summary, secrets
are redacted and every size is capped before anything is written (`finish`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# The fixed sections of §4, in order: (id, heading). The title is the `# ` line above them.
SECTIONS: tuple[tuple[str, str], ...] = (
    ("state", "Current state and next steps"),
    ("task", "Task as specified"),
    ("files", "Important files and functions"),
    ("commands", "Usual commands"),
    ("errors", "Errors and corrections"),
    ("learnings", "Learnings"),
    ("results", "Key results"),
    ("worklog", "Worklog"),
)
SECTION_IDS: tuple[str, ...] = tuple(s for s, _ in SECTIONS)
HEADINGS: dict[str, str] = dict(SECTIONS)

CHARS_PER_TOKEN = 4
SECTION_MAX_CHARS = 2_000 * CHARS_PER_TOKEN  # ~2,000 tokens a section (§4)
TOTAL_MAX_CHARS = 12_000 * CHARS_PER_TOKEN  # ~12,000 tokens the whole file (§4)
TITLE_MAX_CHARS = 100
EMPTY_BODY = "(none yet)"
# Room reserved in a capped section for the cut marker and a closing code fence.
MARK_RESERVE = 64
FOOTER_PREFIX = "<!-- memd session summary"

_WORKLOG_MARK = re.compile(r"^- \[… (\d+) earlier entr(?:y|ies) condensed …\]$")
_TAIL_MARK = re.compile(r"^\[… \d+ characters cut …\]$")
_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_FENCED_BLOCK = re.compile(r"^```[ \t]*(?:markdown|md)?[ \t]*\n(.*)^```[ \t]*$", re.MULTILINE | re.DOTALL | re.IGNORECASE)
_H1 = re.compile(r"^#(?=\s|$)\s*(.*?)(?:\s+#+)?\s*$")
_H2 = re.compile(r"^##(?=\s|$)\s*(.*?)(?:\s+#+)?\s*$")
_HEADINGISH = re.compile(r"^(\s{0,3})(#{1,2})(?=\s|$)")


@dataclass
class Summary:
    """A summary as its title and the bodies of the known sections (missing ids = absent)."""

    title: str = ""
    sections: dict[str, str] = field(default_factory=dict)

    def body(self, sid: str) -> str:
        return self.sections.get(sid, "")

    def is_empty(self) -> bool:
        return not any(_meaningful(b) for b in self.sections.values())


def _meaningful(body: str) -> bool:
    s = body.strip()
    return bool(s) and s != EMPTY_BODY


def _norm_heading(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().strip(":").strip()).lower()


def section_id(heading: str) -> str | None:
    """The section a heading names; tolerant of case, a colon, and short forms models use."""
    h = _norm_heading(heading)
    for sid, canonical in SECTIONS:
        if h == canonical.lower():
            return sid
    aliases = (
        ("current state", "state"), ("task", "task"), ("important files", "files"), ("files", "files"),
        ("usual commands", "commands"), ("commands", "commands"), ("errors", "errors"),
        ("learnings", "learnings"), ("key results", "results"), ("results", "results"),
        ("worklog", "worklog"), ("work log", "worklog"),
    )  # fmt: skip
    for prefix, sid in aliases:
        if h.startswith(prefix):
            return sid
    return None


def _strip_outer_fence(text: str) -> str:
    """Models sometimes wrap the whole answer in a ```markdown fence (cut off: no closing one)."""
    s = text.strip()
    if not s.startswith("```") or "\n" not in s:
        return s
    s = s[s.index("\n") + 1 :]
    return s[:-3].rstrip("\n") if s.endswith("```") else s


def parse_summary(text: str) -> Summary:
    """The title and known sections of a Markdown summary; anything else is dropped.

    Headings inside code fences are content. A heading met twice keeps both
    bodies. The footer line memd writes is not content. An answer that wraps
    the summary in a fence after some prose is read from inside the fence.
    """
    out = _parse(_strip_outer_fence(text))
    if not out.sections:
        for inner in _FENCED_BLOCK.findall(text):
            out = _parse(inner)
            if out.sections:
                break
    return out


def _parse(text: str) -> Summary:
    out = Summary()
    current: str | None = None  # a section id, "" for an unknown section, None before any
    buf: dict[str, list[str]] = {}
    in_fence = False
    for line in text.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence:
            if line.startswith(FOOTER_PREFIX):
                continue
            m2 = _H2.match(line)
            if m2:
                current = section_id(m2.group(1)) or ""
                if current:
                    buf.setdefault(current, [])
                    if buf[current]:
                        buf[current].append("")
                continue
            m1 = _H1.match(line)
            if m1 and current is None and not out.title:
                out.title = one_line(m1.group(1), TITLE_MAX_CHARS)
                continue
        if current:
            buf[current].append(line)
    for sid in SECTION_IDS:
        if sid in buf:
            body = "\n".join(buf[sid]).strip("\n")
            out.sections[sid] = "" if body.strip() == EMPTY_BODY else body
    return out


def sanitize_body(body: str) -> str:
    """A body that cannot break the document's structure when read back.

    A `# ` or `## ` line outside a code fence would start a new section on the
    next parse, so it is escaped; an unclosed fence would swallow the sections
    after it, so it is closed.
    """
    lines: list[str] = []
    in_fence = False
    fence = "```"
    for line in body.strip("\n").splitlines():
        m = _FENCE.match(line)
        if m:
            if not in_fence:
                fence = m.group(1)
            in_fence = not in_fence
        elif not in_fence:
            line = _HEADINGISH.sub(lambda mm: mm.group(1) + "\\" + mm.group(2), line)
            if line.startswith(FOOTER_PREFIX):
                line = "\\" + line
        lines.append(line.rstrip())
    if in_fence:
        lines.append(fence)
    return "\n".join(lines).strip("\n")


def render_summary(summary: Summary, footer: str | None = None) -> str:
    """The file's text: title, every section in order (empty ones say so), footer."""
    title = one_line(summary.title, TITLE_MAX_CHARS) or "Session summary"
    parts = [f"# {title}"]
    for sid, heading in SECTIONS:
        body = summary.sections.get(sid, "").strip("\n")
        parts.append(f"## {heading}\n{body if body.strip() else EMPTY_BODY}")
    text = "\n\n".join(parts) + "\n"
    if footer:
        text += f"\n{footer}\n"
    return text


def _cut_tail(body: str, limit: int) -> str:
    """`body` within `limit` characters, cut at a line end where possible, with a marker."""
    if len(body) <= limit:
        return body
    lines = body.splitlines()
    if lines and _TAIL_MARK.match(lines[-1]):  # an earlier cut: cut again from above it
        body = "\n".join(lines[:-1])
    keep = max(0, limit - MARK_RESERVE)
    head = body[:keep]
    nl = head.rfind("\n")
    if nl >= keep // 2:
        head = head[:nl]
    cut = len(body) - len(head)
    return sanitize_body(head) + f"\n[… {cut} characters cut …]"


def _condense_worklog(body: str, drop_chars: int) -> str:
    """Drop the oldest worklog lines until `drop_chars` are gone, counting them in one marker.

    The newest line is always kept: the worklog's point is what happened last.
    """
    lines = [x for x in body.splitlines() if x.strip()]
    dropped = 0
    if lines and (m := _WORKLOG_MARK.match(lines[0])):
        dropped = int(m.group(1))
        drop_chars += len(lines[0]) + 1
        lines = lines[1:]
    removed = 0
    while len(lines) > 1 and removed < drop_chars:
        removed += len(lines[0]) + 1
        lines.pop(0)
        dropped += 1
    if dropped:
        word = "entry" if dropped == 1 else "entries"
        lines.insert(0, f"- [… {dropped} earlier {word} condensed …]")
    return "\n".join(lines)


def _total(sections: dict[str, str]) -> int:
    return len(render_summary(Summary("x" * TITLE_MAX_CHARS, sections)))


def bound_summary(sections: dict[str, str]) -> dict[str, str]:
    """Sections within the §4 bounds: each ≤ SECTION_MAX_CHARS, the whole ≤ TOTAL_MAX_CHARS.

    Condenses rather than grows: the oldest worklog lines go first (counted in
    a marker), then the tails of the largest sections are cut (with a marker).
    Pure and idempotent; sections already within bounds are returned as they are.
    """
    out = {sid: sections[sid] for sid in SECTION_IDS if sid in sections}
    if "worklog" in out and len(out["worklog"]) > SECTION_MAX_CHARS:
        out["worklog"] = _condense_worklog(out["worklog"], len(out["worklog"]) - SECTION_MAX_CHARS + MARK_RESERVE)
    for sid, body in out.items():
        if len(body) > SECTION_MAX_CHARS:
            out[sid] = _cut_tail(body, SECTION_MAX_CHARS)
    excess = _total(out) - TOTAL_MAX_CHARS
    if excess > 0 and out.get("worklog"):
        out["worklog"] = _condense_worklog(out["worklog"], excess + MARK_RESERVE)
        excess = _total(out) - TOTAL_MAX_CHARS
    guard = 0
    while excess > 0 and guard < 8:
        guard += 1
        level = _water_level([len(b) for b in out.values()], excess + MARK_RESERVE)
        for sid, body in out.items():
            if len(body) > level:
                out[sid] = _cut_tail(body, level)
        excess = _total(out) - TOTAL_MAX_CHARS
    return out


def _water_level(sizes: list[int], excess: int) -> int:
    """The largest cap that removes `excess` characters by cutting only the sections above it.

    The largest sections give first and none is cut below the others, so one
    bloated section cannot empty the rest.
    """
    lo, hi = 0, max(sizes, default=0)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(max(0, n - mid) for n in sizes) >= excess:
            lo = mid
        else:
            hi = mid - 1
    return lo


def merge_sections(new: Summary, previous: Summary | None, fallback: dict[str, str] | None = None) -> Summary:
    """The model's answer made whole: missing sections from `fallback`, then from the previous summary."""
    prev = previous or Summary()
    merged = Summary(title=new.title or prev.title)
    for sid in SECTION_IDS:
        if sid in new.sections:
            merged.sections[sid] = new.sections[sid]
        elif fallback and sid in fallback:
            merged.sections[sid] = fallback[sid]
        elif sid in prev.sections:
            merged.sections[sid] = prev.sections[sid]
    return merged


def redact(text: str) -> str:
    """Imported on first use: compiling the rule list costs start-up time `memd status` should not pay."""
    from memd.redact import redactor as rules  # noqa: PLC0415 - start-up

    return rules.redact(text)


def finish(summary: Summary, redact_text: Any) -> Summary:
    """Redacted, structure-safe, bounded: what may be written."""
    title = one_line(redact_text(summary.title), TITLE_MAX_CHARS)
    sections = {sid: sanitize_body(redact_text(summary.sections.get(sid, ""))) for sid in SECTION_IDS}
    return Summary(title=title, sections=bound_summary(sections))


def one_line(text: str, limit: int) -> str:
    s = re.sub(r"\s+", " ", text or "").strip()
    return s if len(s) <= limit else s[: limit - 1].rstrip() + "…"
