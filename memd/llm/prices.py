"""What a model call costs: a dated price table, overridable per home, and the usage it prices.

One table for every reader that shows money (`memd cost`, `memd status`, the backlog estimate,
`memd ui`), so two screens never disagree. The built-in table is dated (`AS_OF`): prices change,
and a figure without its date misleads. A home may override or extend it with
`<home>/memd/prices.json`:

    {"asOf": "2026-12-01", "models": {"claude-haiku-4-5": {"input": 1.0, "output": 5.0}}}

Prices are US dollars per million tokens. A model is matched by its exact name first, then by the
longest family prefix of the table (`claude-haiku-4-5-20251001` prices as `claude-haiku-4-5`).
A model the table does not know prices as `None` (shown as "unknown", never as 0): a wrong zero
would hide spending. Calls through the user's Claude Code (`provider: claude-code`) are priced by
the same table: the figure is what the same tokens would cost through the API, which the README
says.

Invariants: pure except `load_prices`, which reads one small file and never raises (a bad file
gives the built-in table and a one-line problem naming the file and field).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["AS_OF", "BUILTIN", "ModelPrice", "PriceTable", "load_prices"]

AS_OF = "2026-11-01"
PRICES_FILE = "prices.json"
MAX_FILE_BYTES = 256 * 1024


@dataclass(frozen=True)
class ModelPrice:
    """US dollars per million tokens. Cache writes and reads default to the API's 1.25x and 0.1x."""

    input: float
    output: float
    cache_write: float | None = None
    cache_read: float | None = None

    def cost(self, input_tokens: int, output_tokens: int, cache_read: int = 0, cache_write: int = 0) -> float:
        cw = self.cache_write if self.cache_write is not None else self.input * 1.25
        cr = self.cache_read if self.cache_read is not None else self.input * 0.1
        total = input_tokens * self.input + output_tokens * self.output + cache_write * cw + cache_read * cr
        return total / 1_000_000


# Family prefixes, matched longest first. Anthropic's list prices on AS_OF.
BUILTIN: dict[str, ModelPrice] = {
    "claude-haiku-4-5": ModelPrice(1.0, 5.0),
    "claude-haiku-3-5": ModelPrice(0.8, 4.0),
    "claude-3-5-haiku": ModelPrice(0.8, 4.0),
    "claude-3-haiku": ModelPrice(0.25, 1.25),
    "claude-sonnet-4": ModelPrice(3.0, 15.0),
    "claude-3-7-sonnet": ModelPrice(3.0, 15.0),
    "claude-3-5-sonnet": ModelPrice(3.0, 15.0),
    "claude-opus-4-5": ModelPrice(5.0, 25.0),
    "claude-opus-4-6": ModelPrice(5.0, 25.0),
    "claude-opus-4-1": ModelPrice(15.0, 75.0),
    "claude-opus-4-0": ModelPrice(15.0, 75.0),
    "claude-opus-4": ModelPrice(15.0, 75.0),
    # Claude Code's aliases, as `--model` takes them (provider claude-code)
    "haiku": ModelPrice(1.0, 5.0),
    "sonnet": ModelPrice(3.0, 15.0),
    "opus": ModelPrice(5.0, 25.0),
}


@dataclass(frozen=True)
class PriceTable:
    """A dated table of model prices; `source` says where it came from (built-in or a file)."""

    models: dict[str, ModelPrice] = field(default_factory=lambda: dict(BUILTIN))
    as_of: str = AS_OF
    source: str = "built-in"

    def price(self, model: str) -> ModelPrice | None:
        """The price of `model`: its exact entry, else the longest family prefix, else None."""
        if model in self.models:
            return self.models[model]
        best = ""
        for prefix in self.models:
            if model.startswith(prefix) and len(prefix) > len(best):
                best = prefix
        return self.models[best] if best else None

    def cost(
        self, model: str, input_tokens: int, output_tokens: int, cache_read: int = 0, cache_write: int = 0
    ) -> float | None:
        """US dollars for one model's tokens, or None when the table does not know the model."""
        p = self.price(model)
        return None if p is None else p.cost(input_tokens, output_tokens, cache_read, cache_write)


def _price_of(name: str, raw: Any, path: Path) -> ModelPrice:
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: models.{name}: expected an object with input and output")
    vals: dict[str, float | None] = {}
    for key, attr in (("input", "input"), ("output", "output"), ("cacheWrite", "cache_write"),
                      ("cacheRead", "cache_read")):  # fmt: skip
        v = raw.get(key)
        if v is None and key in ("input", "output"):
            raise ValueError(f"{path}: models.{name}.{key}: missing")
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0):
            raise ValueError(f"{path}: models.{name}.{key}: expected a number of dollars per million tokens ≥ 0")
        vals[attr] = None if v is None else float(v)
    return ModelPrice(vals["input"] or 0.0, vals["output"] or 0.0, vals["cache_write"], vals["cache_read"])


def load_prices(memd_dir: Path | None) -> tuple[PriceTable, str | None]:
    """The built-in table overlaid with `<memd_dir>/prices.json`; (table, problem or None).

    Never raises: a missing file is the built-in table with no problem; an unreadable or invalid
    one is the built-in table and a one-line problem naming the file and the field.
    """
    if memd_dir is None:
        return PriceTable(), None
    path = memd_dir / PRICES_FILE
    try:
        if not path.is_file():
            return PriceTable(), None
        if path.stat().st_size > MAX_FILE_BYTES:
            return PriceTable(), f"{path}: larger than {MAX_FILE_BYTES} bytes; the built-in prices are used"
        data = json.loads(path.read_text(encoding="utf-8"), parse_constant=_no_constant)
        if not isinstance(data, dict) or not isinstance(data.get("models", {}), dict):
            raise ValueError(f"{path}: models: expected an object of model names")
        models = dict(BUILTIN)
        for name, raw in (data.get("models") or {}).items():
            models[str(name)] = _price_of(str(name), raw, path)
        as_of = data.get("asOf")
        if as_of is not None and not isinstance(as_of, str):
            raise ValueError(f"{path}: asOf: expected a date such as 2026-12-01")
        return PriceTable(models, as_of or AS_OF, str(path)), None
    except (OSError, UnicodeDecodeError) as e:
        return PriceTable(), f"{path}: unreadable ({e.__class__.__name__}); the built-in prices are used"
    except ValueError as e:
        msg = str(e)
        if not msg.startswith(str(path)):
            msg = f"{path}: not JSON ({msg.splitlines()[0][:120]})"
        return PriceTable(), f"{msg}; the built-in prices are used"


def _no_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")
