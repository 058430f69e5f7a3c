"""A model's answer as data: the one JSON object in its text, and the size caps on what it proposes.

Model output is untrusted input. `parse_model_json` finds the JSON object an extraction or
dream model answered with, tolerating what models add around it (a ```json fence, prose)
and refusing what would need guessing; `ModelOutputError` is an answer unusable as a whole.
`Caps` are the limits the operations in it are held to. The operations themselves are
validated one by one in memd/memory/operations.py.

Everything here is pure: nothing is read or written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from memd.errors import ModelAPIError

__all__ = [
    "MAX_OUTPUT_CHARS",
    "Caps",
    "ModelOutputError",
    "parse_model_json",
]

MAX_OUTPUT_CHARS = 16_000_000  # a larger answer is not read at all (max_tokens bounds real ones far lower)
_MAX_DECODE_TRIES = 64
_FENCE = re.compile(r"```[ \t]*(?:json|JSON|json5)?[ \t]*\r?\n(.*?)```", re.DOTALL)


class ModelOutputError(ValueError, ModelAPIError):
    """A model's answer is unusable as a whole; `reason` is one line. Exit code 4."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Caps:
    """Size limits on what a model may write. Characters, except `max_body_bytes` (UTF-8)."""

    max_operations: int = 50
    max_description: int = 300
    max_body_bytes: int = 8 * 1024
    max_name: int = 200
    max_reason: int = 300


# --- parsing --------------------------------------------------------------------------


def parse_model_json(text: str) -> dict[str, Any]:
    """The one JSON object in a model's answer.

    Tolerates what models add around JSON: a ```json fence, prose before and
    after. Refuses what would need guessing: no object, two objects, a list,
    an answer too large to be honest.
    """
    if not isinstance(text, str) or not text.strip():
        raise ModelOutputError("empty model output")
    if len(text) > MAX_OUTPUT_CHARS:
        raise ModelOutputError(f"model output over {MAX_OUTPUT_CHARS:,} characters")
    stripped = text.strip().lstrip("\ufeff")
    whole = _loads(stripped)
    if whole is not None:
        return _require_object(whole)
    fenced = [obj for obj in (_loads(m.group(1).strip()) for m in _FENCE.finditer(stripped)) if obj is not None]
    if fenced:
        return _only_one([_require_object(obj) for obj in fenced])
    return _only_one(list(_objects_in_prose(stripped)))


def _loads(text: str) -> Any:
    """The JSON value of `text`, or None if it is not exactly one JSON value."""
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None
    except RecursionError:
        raise ModelOutputError("model output JSON is nested too deeply") from None


def _require_object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ModelOutputError(f"model output is a JSON {type(value).__name__}, not an object")
    return value


def _only_one(objects: list[dict[str, Any]]) -> dict[str, Any]:
    if not objects:
        raise ModelOutputError("no JSON object in model output")
    if len(objects) > 1:
        raise ModelOutputError(f"{len(objects)} JSON objects in model output, expected one")
    return objects[0]


def _objects_in_prose(text: str) -> Iterator[dict[str, Any]]:
    """Top-level JSON objects embedded in prose, by trying to decode at each `{`.

    Bounded: a few dozen failed starts, then stop (a broken answer is not
    worth a quadratic search).
    """
    decoder = json.JSONDecoder()
    pos = text.find("{")
    failures = 0
    while pos != -1 and failures < _MAX_DECODE_TRIES:
        try:
            obj, end = decoder.raw_decode(text, pos)
        except ValueError:
            failures += 1
            pos = text.find("{", pos + 1)
            continue
        except RecursionError:
            raise ModelOutputError("model output JSON is nested too deeply") from None
        if isinstance(obj, dict):
            yield obj
        pos = text.find("{", end)
