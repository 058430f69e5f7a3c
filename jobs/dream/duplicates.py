"""Near-duplicate memories: same type, difflib ratio ≥ `SIMILARITY` over normalised words. Pure."""

from __future__ import annotations

import difflib
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
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
    """Pairs (i, j<i) that *may* reach `threshold`: an exact prefix filter, so no pair is missed.

    ratio = 2M/(la+lb) ≥ r with M ≤ lb gives M ≥ r·la/(2−r): two documents that
    similar share at least that many (word, occurrence) elements, so, with the
    elements of every document ordered by global rarity, they share one among
    the first la − ⌈r·la/(2−r)⌉ + 1 of each. This keeps 1,000 memories far from
    the half-million comparisons of a naive scan.
    """
    elements = []
    for toks in docs:
        seen: Counter[str] = Counter()
        els = []
        for t in toks:
            els.append((t, seen[t]))
            seen[t] += 1
        elements.append(els)
    freq: Counter[tuple[str, int]] = Counter(e for els in elements for e in els)
    index: dict[tuple[str, int], list[int]] = {}
    out: dict[int, set[int]] = {}
    for i, els in enumerate(elements):
        n = len(els)
        need = max(1, math.ceil(threshold * n / (2 - threshold) - 1e-9))
        prefix = sorted(els, key=lambda e: (freq[e], e))[: max(0, n - need + 1)]
        for e in prefix:
            for j in index.get(e, ()):
                lj = len(elements[j])
                if 2 * min(n, lj) >= threshold * (n + lj):
                    out.setdefault(i, set()).add(j)
            index.setdefault(e, []).append(i)
    return out


def _alike(a: list[str], bag_a: Counter[str], b: list[str], bag_b: Counter[str], threshold: float) -> bool:
    """ratio ≤ 2·(multiset overlap)/(la+lb): a cheap exact bound first, then the quadratic ratio."""
    shared = sum(min(n, bag_b[t]) for t, n in bag_a.items() if t in bag_b)
    return 2 * shared >= threshold * (len(a) + len(b)) and similarity(a, b) >= threshold


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
        bags = [Counter(d) for d in docs]
        cands = _candidates(docs, threshold)
        members: dict[int, list[int]] = {}
        for i in range(len(order)):
            home = next((k for k in sorted(cands.get(i, ())) if k in members and
                         _alike(docs[k], bags[k], docs[i], bags[i], threshold)), None)  # fmt: skip
            if home is None:
                members[i] = [i]
            else:
                members[home].append(i)
        groups += [[order[j] for j in g] for g in members.values() if len(g) > 1]
    return groups
