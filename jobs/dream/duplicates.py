"""Near-duplicate memories: same type, difflib ratio ≥ `SIMILARITY` over normalised words. Pure."""

from __future__ import annotations

import difflib
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import chain, compress
from operator import itemgetter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memd.memory.file import Memory

SIMILARITY = 0.85
_SLACK = 3  # words beyond the plain prefixes each side keeps (see `_candidates`): fewer survivors to check


_TOKEN = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff]|[^\W_]+")


# ASCII text: NFKC leaves it as it is, casefold is lower(), and `[^\W_]` is `[a-z0-9]`; so its
# words are the runs of those, every other byte a separator (bytes.translate and split: C, no regex).
_ASCII_WORD = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789")
_ASCII_SEPARATORS = bytes(c if c in _ASCII_WORD else 0x20 for c in range(256))


def tokens(text: str) -> list[str]:
    """Normalised words (NFKC, case-folded, punctuation dropped); each CJK character is a word."""
    if text.isascii():  # the same words as the regex below gives (tests/jobs/dream/test_duplicates.py)
        return text.lower().encode("ascii").translate(_ASCII_SEPARATORS).decode("ascii").split()
    return _TOKEN.findall(unicodedata.normalize("NFKC", text).casefold())


def similarity(a: Sequence[str], b: Sequence[str]) -> float:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def _candidates(docs: list[list[str]], threshold: float) -> dict[int, set[int]]:
    """Pairs (i, j<i) whose multiset overlap allows `threshold`: exact, so no similar pair is missed.

    difflib's ratio is 2M/(la+lb), and its M (matched words) never exceeds the multiset
    overlap O of the two word lists, so ratio ≥ r needs 2·O ≥ r·(la+lb). The filter works on
    each document's set of distinct words, ordered by global rarity (fewest documents first),
    visiting documents shortest first (x after every y it is compared with, so ly ≤ lx):

    * O ≤ min(la, lb), so O ≥ ⌈r·lx/(2−r)⌉ and O ≥ ⌈r·ly⌉; the distinct words the two share,
      D, number at least O less x's repeated words (lx − |x's set|), and at least ⌈r·ly⌉ less
      y's: x needs D ≥ need_x, y D ≥ need_y;
    * in one global order, a set's first n − D + k words hold the first k shared ones; so x's
      first n_x − need_x + 1 + `_SLACK` words and y's first n_y − need_y + 1 + `_SLACK` (its
      indexed prefix) share at least min(1 + `_SLACK`, need_x) words. Counting, for each x,
      how many of its prefix words each indexed y holds (`Counter` over the postings: C, not a
      Python loop a posting) keeps only the ys that reach it, a few per document;
    * a document whose repeats leave need ≤ 0 is compared with every earlier one.

    Survivors are checked with the exact multiset overlap, so the result is exactly the pairs
    whose overlap reaches the bound: the same pairs an exhaustive check keeps
    (tests/jobs/dream/test_duplicates.py holds it to one), at a cost that follows the rare words
    each document shares, not the number of pairs.
    """
    ratio = threshold / (2 - threshold)
    lens = list(map(len, docs))
    sets = list(map(set, docs))
    seen_in: Counter[str] = Counter(chain.from_iterable(sets))  # documents holding each word
    rank = {w: r for r, (w, _n) in enumerate(sorted(seen_in.items(), key=itemgetter(1)))}  # rarest first
    rank_of = rank.__getitem__
    postings: list[list[int]] = [[] for _ in range(len(rank))]
    bags: dict[int, Counter[str]] = {}  # word counts, made for the documents a survivor names
    done: list[int] = []
    out: dict[int, set[int]] = {}
    for x in sorted(range(len(docs)), key=lens.__getitem__):
        lx = lens[x]
        if lx == 0:
            continue
        ranks = sorted(map(rank_of, sets[x]))
        n, repeats = len(ranks), lx - len(ranks)
        need = max(1, math.ceil(ratio * lx - 1e-9)) - repeats
        if need <= 0:
            survivors: Iterable[int] = done
        else:
            least = min(need, 1 + _SLACK)
            held = Counter(chain.from_iterable(map(postings.__getitem__, ranks[: n - need + 1 + _SLACK])))
            survivors = compress(held.keys(), map(least.__le__, held.values()))  # C: no loop a posting
        shortest = ratio * lx - 1e-9
        bx: Counter[str] | None = None
        for y in survivors:
            ly = lens[y]
            if ly < shortest:
                continue
            bx = bx or _bag(bags, docs, x)
            if 2 * sum((bx & _bag(bags, docs, y)).values()) >= threshold * (lx + ly):
                i, j = (x, y) if x > y else (y, x)
                out.setdefault(i, set()).add(j)
        need_y = math.ceil(threshold * lx - 1e-9) - repeats
        for r in ranks[: n - need_y + 1 + _SLACK] if need_y > 0 else ranks:
            postings[r].append(x)
        done.append(x)
    return out


def _bag(bags: dict[int, Counter[str]], docs: list[list[str]], i: int) -> Counter[str]:
    bag = bags.get(i)
    if bag is None:
        bag = bags[i] = Counter(docs[i])
    return bag


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
            near = cands.get(i)
            home = None if near is None else next((k for k in sorted(near) if k in members and
                                                   similarity(docs[k], docs[i]) >= threshold), None)  # fmt: skip
            if home is None:
                members[i] = [i]
            else:
                members[home].append(i)
        groups += [[order[j] for j in g] for g in members.values() if len(g) > 1]
    return groups
