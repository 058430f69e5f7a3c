"""The drawer switch at extraction (SPEC §18, issue 26): with `memory.global.enabled` false nothing
extraction produces reaches the drawer.

The drawer is then neither rendered nor injected, so a memory stored there would be kept and never
shown. Two halves: the model is told the drawer is off (a cross-project rule that matters to this
project may be filed under the project instead), and whatever still aims at the drawer — the
model's answer or the offline rules' — is held back and named in one log line, so nothing is lost
silently. Pure decisions over the settings; the caller logs.
"""

from __future__ import annotations

from typing import Any

from memd.settings import Settings

DRAWER_OFF_NOTE = """

The global drawer is switched off (memory.global.enabled is false): do not use the "global" scope, anything \
given it is discarded. A rule or preference of the user that holds across projects but matters to this project \
may be filed under "project"; leave out what concerns other projects only."""


def drawer_on(settings: Settings) -> bool:
    return bool(settings.memory.global_.enabled)


def system_prompt(base: str, settings: Settings) -> str:
    """The extraction prompt, with the note that the drawer is off when it is."""
    return base if drawer_on(settings) else base + DRAWER_OFF_NOTE


def withhold(ops: list[Any], settings: Settings) -> tuple[list[Any], list[str]]:
    """(the operations that may be applied, the labels `global:<slug>` of those held back because the
    drawer is off). With the drawer on nothing is held back."""
    if drawer_on(settings):
        return ops, []
    kept = [o for o in ops if o.scope != "global"]
    return kept, [f"global:{o.slug}" for o in ops if o.scope == "global"]
