"""A session's title for `memd sessions` (issue 24 pt 5): the agent's own title, else the first prompt."""

from __future__ import annotations

import json
import os
from pathlib import Path

from memd.transcripts.titles import WIDTH, session_title


def test_a_title_record_wins_over_the_first_prompt(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    lines = [
        {"type": "user", "isMeta": True, "message": {"role": "user", "content": "<local-command-caveat>x"}},
        {"type": "user", "message": {"role": "user", "content": "<command-name>/clear</command-name>"}},
        {"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": "Fix the\nflaky\ttest " + "x" * 200}]}},
    ]
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    title = session_title(p)
    assert title is not None and title.startswith("Fix the flaky test x") and len(title) == WIDTH and title.endswith("…")
    with p.open("a") as f:
        f.write("garbage\n" + "\n".join(json.dumps({"type": "assistant", "message": {"content": "y" * 1000}}) for _ in range(400)))
        f.write("\n" + json.dumps({"type": "custom-title", "customTitle": "Flaky test hunt", "sessionId": "s"}) + "\n")
    assert session_title(p) == "Flaky test hunt"  # a title the user gave, in the tail of a big file
    os.mkfifo(tmp_path / "fifo.jsonl")
    assert session_title(tmp_path / "fifo.jsonl") is None  # never blocks on a FIFO in a transcript's place


# --- logs ------------------------------------------------------------------------------------------------
