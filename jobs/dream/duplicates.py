"""Near-duplicate memories: same type, difflib ratio ≥ `SIMILARITY` over normalised words. Pure."""

from __future__ import annotations

import difflib
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from itertools import chain
from operator import itemgetter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memd.memory.file import Memory

SIMILARITY = 0.85


_TOKEN = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff]|[^\W_]+")


def tokens(text: str) -> list[str]:
    """Normalised words (NFKC, case-folded, punctuation dropped); each CJK character is a word."""
    return _TOKEN.findall(unicodedata.normalize("NFKC", text).casefold())


def similarity(a: Sequence[str], b: Sequence[str]) -> float:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def _candidates(docs: list[list[str]], threshold: float) -> dict[int, set[int]]:
    """Pairs (i, j<i) whose multiset overlap allows `threshold`: exact, so no similar pair is missed.

    difflib's ratio is 2M/(la+lb), and its M (matched words) never exceeds the
    multiset overlap O of the two word lists, so ratio ≥ r needs 2·O ≥ r·(la+lb).
    O is the size of the intersection of the (word, occurrence) element sets. The
    filter is PPJoin (prefix and positional filtering over elements ordered by
    global rarity), visiting documents shortest first:

    * a document of length l shares at least ⌈r·l/(2−r)⌉ elements with any match
      (M ≤ the shorter length), so the two share one among the first
      l − ⌈r·l/(2−r)⌉ + 1 of its elements (the probe prefix);
    * an earlier (no longer) document of length l shares at least ⌈r·l⌉ with any
      later one, so only its first l − ⌈r·l⌉ + 1 elements are indexed;
    * a pair first seen at positions p, q cannot reach the bound if the elements
      left after them cannot, and is dropped at once.

    Survivors are checked with the exact overlap (the popcount of two element bit sets), so the
    result is exactly the pairs whose overlap reaches the bound: the same pairs
    an exhaustive check keeps, at a cost that follows the rare elements each
    document shares, not the number of pairs.
    """
    elements = [_elements(toks) for toks in docs]
    freq: Counter[object] = Counter(chain.from_iterable(elements))
    rank = {e: r for r, (e, _n) in enumerate(sorted(freq.items(), key=itemgetter(1)))}  # rarest first; ties stay in input order
    ordered = [sorted(map(rank.__getitem__, els)) for els in elements]
    power = [1 << r for r in range(len(rank))]
    bits = [sum(map(power.__getitem__, o)) for o in ordered]  # each element set as an int: overlap = popcount of an AND
    index: dict[int, list[tuple[int, int, int]]] = {}
    starts: dict[int, int] = {}
    out: dict[int, set[int]] = {}
    ratio = threshold / (2 - threshold)
    for x in sorted(range(len(docs)), key=lambda i: len(ordered[i])):
        ox = ordered[x]
        lx = len(ox)
        if lx == 0:
            continue
        probe = lx - max(1, math.ceil(ratio * lx - 1e-9)) + 1
        shortest = ratio * lx - 1e-9
        overlap: dict[int, int] = {}
        for p in range(probe):
            posting = index.get(ox[p])
            if posting is None:
                continue
            skip = starts.get(ox[p], 0)
            while skip < len(posting) and posting[skip][2] < shortest:
                skip += 1  # lengths only grow: a y too short for this x is too short for every later one
            starts[ox[p]] = skip
            for k in range(skip, len(posting)):
                y, q, ly = posting[k]
                seen_ = overlap.get(y, 0)
                if seen_ < 0:
                    continue
                if seen_ + 1 + min(lx - p - 1, ly - q - 1) < threshold * (lx + ly) / 2 - 1e-9:
                    overlap[y] = -1
                else:
                    overlap[y] = seen_ + 1
        for y, seen_ in overlap.items():
            if seen_ > 0 and 2 * (bits[x] & bits[y]).bit_count() >= threshold * (lx + len(ordered[y])):
                i, j = (x, y) if x > y else (y, x)
                out.setdefault(i, set()).add(j)
        for p in range(lx - max(1, math.ceil(threshold * lx - 1e-9)) + 1):
            index.setdefault(ox[p], []).append((x, p, lx))
    return out


def _elements(toks: list[str]) -> list[object]:
    """A document's (word, occurrence) elements: a word's first occurrence is the word itself (a str,
    hashed once), its k-th repeat (word, k). Any fixed global order of elements keeps the filter exact."""
    counts = Counter(toks)
    return [*counts, *((t, k) for t, c in counts.items() if c > 1 for k in range(1, c))]


def near_duplicate_groups(memories: Sequence[Memory], threshold: float = SIMILARITY) -> list[list[Memory]]:
    """Groups of memories of one type whose description+body are near duplicates, newest first.

    Greedy and anchored: each memory (newest first) joins the first group whose
    newest member it resembles, so a chain a≈b≈c never merges a with a c it
    does not resemble.
    """
    groups: list[list[Memory]] = []
    by_type: dict[str, list[Memory]] = {}
    for m in memories:
        by_type.setdefault(m.type, []).append(m)
    for same in by_type.values():
        order = sorted(same, key=lambda m: (-m.mtime, m.path.name))
        docs = [tokens(f"{m.description}\n{m.body}") for m in order]
        cands = _candidates(docs, threshold)
        members: dict[int, list[int]] = {}
        for i in range(len(order)):
            home = next((k for k in sorted(cands.get(i, ())) if k in members and
                         similarity(docs[k], docs[i]) >= threshold), None)  # fmt: skip
            if home is None:
                members[i] = [i]
            else:
                members[home].append(i)
        groups += [[order[j] for j in g] for g in members.values() if len(g) > 1]
    return groups
