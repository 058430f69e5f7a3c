"""The document: parse, render, bound, redact (pure)."""

from __future__ import annotations

import json
import re

from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from jobs.summary.document import (
    FOOTER_PREFIX,
    SECTION_IDS,
    SECTION_MAX_CHARS,
    TOTAL_MAX_CHARS,
    Summary,
    bound_summary,
    finish,
    parse_summary,
    render_summary,
)
from memd.redact.redactor import redact
from tests.jobs.summary.kit import assert_whole


def test_parse_keeps_known_sections_drops_unknown_and_ignores_fenced_headings() -> None:
    text = """```markdown
Sure! Here is the summary.
# Porting the parser
## Current state and next steps
Halfway.
## Random musings
drop me
## task as specified:
Port it.
```
## Learnings
not a heading: inside a fence
```
## Worklog
- did a thing
## Worklog
- did another
```"""
    doc = parse_summary(text)
    assert parse_summary(text.rsplit("```", 1)[0]).sections == doc.sections  # cut off before its closing fence
    assert doc.title == "Porting the parser"
    assert doc.sections["state"] == "Halfway."
    assert doc.sections["task"].startswith("Port it.") and "## Learnings" in doc.sections["task"]
    assert "learnings" not in doc.sections and "drop me" not in json.dumps(doc.sections)
    assert doc.sections["worklog"] == "- did a thing\n\n- did another"


def test_render_parse_round_trip_and_structure_is_safe_against_content() -> None:
    hostile = Summary("T", {"state": "## Learnings\n# Title\n```\nunclosed", "task": "<!-- memd session summary x -->"})
    done = finish(hostile, lambda s: s)
    text = render_summary(done, f"{FOOTER_PREFIX} · x -->")
    doc = assert_whole(text)
    assert "learnings" in doc.sections and doc.sections["learnings"] == ""
    assert "\\## Learnings" in doc.sections["state"]
    again = render_summary(parse_summary(text), f"{FOOTER_PREFIX} · x -->")
    assert again == text


def test_secrets_are_redacted_from_what_is_written() -> None:
    key = "sk-ant-api03-" + "A" * 40
    done = finish(Summary(f"deploy {key}", {"commands": f"- `export ANTHROPIC_API_KEY={key}`"}), redact)
    assert key not in render_summary(done)


section_text = st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300), max_size=60).map(
    lambda lines: "\n".join(f"- {x}" for x in lines)
)


@hsettings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(SECTION_IDS), st.one_of(section_text, st.text(max_size=20_000)), min_size=1))
def test_bound_summary_bounds_every_section_and_the_whole(sections: dict[str, str]) -> None:
    out = bound_summary(sections)
    assert set(out) == set(sections)
    assert all(len(b) <= SECTION_MAX_CHARS for b in out.values())
    assert len(render_summary(Summary("t" * 100, out))) <= TOTAL_MAX_CHARS
    assert bound_summary(out) == out  # idempotent: an update condenses, it does not keep cutting
    if len(render_summary(Summary("t" * 100, sections))) <= TOTAL_MAX_CHARS and all(
        len(b) <= SECTION_MAX_CHARS for b in sections.values()
    ):
        assert out == {k: sections[k] for k in SECTION_IDS if k in sections}


def test_bound_summary_drops_oldest_worklog_lines_first_then_cuts_tails() -> None:
    log = "\n".join(f"- step {i:04d} " + "w" * 60 for i in range(400))
    big = "\n".join(f"- fact {i} " + "f" * 70 for i in range(200))
    sections = {sid: big for sid in SECTION_IDS}
    sections["worklog"] = log
    out = bound_summary(sections)
    wl = out["worklog"].splitlines()
    assert re.match(r"^- \[… \d+ earlier entries condensed …\]$", wl[0])
    assert wl[-1] == log.splitlines()[-1]  # the newest entry stays
    assert out["state"].startswith("- fact 0 ") and out["state"].endswith("characters cut …]")
    # Condensing again keeps one marker and a running count.
    grown = dict(out, worklog=out["worklog"] + "\n" + "\n".join(f"- later {i} " + "z" * 60 for i in range(50)))
    wl2 = bound_summary(grown)["worklog"].splitlines()
    assert sum(1 for x in wl2 if "earlier entries condensed" in x) == 1
    assert int(re.findall(r"\d+", wl2[0])[0]) > int(re.findall(r"\d+", wl[0])[0])
