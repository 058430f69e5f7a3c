"""Near duplicates and the exact candidate filter (pure)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from jobs.dream.duplicates import _candidates, near_duplicate_groups, similarity, tokens
from memd.memory.file import Memory
from tests.jobs.dream.helpers import (
    mem,
)


def test_near_duplicates_are_grouped_by_type_and_newest_first() -> None:
    a = mem("tabs", "feedback", "indent with tabs", "Always indent with tabs in this repo. Why: history.", 100)
    b = mem("tabs-2", "feedback", "Indent with TABS", "Always indent with tabs in this repo!  Why: history", 300)
    c = mem("tabs-user", "user", "indent with tabs", "Always indent with tabs in this repo. Why: history.", 200)
    x = mem("deploy", "feedback", "deploy on fridays", "Never deploy on Fridays; the on-call is thin.", 50)
    groups = near_duplicate_groups([a, b, c, x])
    assert [[m.name for m in g] for g in groups] == [["tabs-2", "tabs"]]
    assert similarity(tokens("a b c d e f g h i j"), tokens("a b c d e f g h i k")) == pytest.approx(0.9)
    assert near_duplicate_groups([a, mem("t3", "feedback", "tabs", "completely different words here", 400)]) == []


@hsettings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from("abcdefg"), min_size=1, max_size=14), min_size=2, max_size=9))
def test_prefix_filter_never_misses_a_similar_pair(docs: list[list[str]]) -> None:
    """The candidate filter is exact: every pair at or over the threshold is a candidate."""
    cands = _candidates(docs, 0.85)
    for i in range(len(docs)):
        for j in range(i):
            if similarity(docs[j], docs[i]) >= 0.85:
                assert j in cands.get(i, set()), (docs[j], docs[i])


def _bound_pairs(docs: list[list[str]], threshold: float) -> dict[int, set[int]]:
    """The exhaustive reference: every pair (i, j<i) whose multiset overlap allows `threshold`."""
    bags = [Counter(d) for d in docs]
    out: dict[int, set[int]] = {}
    for i in range(len(docs)):
        for j in range(i):
            shared = sum((bags[i] & bags[j]).values())
            if docs[i] and docs[j] and 2 * shared >= threshold * (len(docs[i]) + len(docs[j])):
                out.setdefault(i, set()).add(j)
    return out


@hsettings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from("abcdefghij"), min_size=0, max_size=30), min_size=2, max_size=12),
       st.sampled_from([0.5, 0.7, 0.85, 0.9, 1.0]))  # fmt: skip
def test_candidates_are_exactly_the_pairs_the_overlap_bound_allows(docs: list[list[str]], threshold: float) -> None:
    """The prefix, length and positional filters drop nothing an exhaustive check keeps, and
    keep nothing it drops: the candidates are the pairs whose overlap reaches the bound."""
    assert _candidates(docs, threshold) == _bound_pairs(docs, threshold)


def _corpus(n: int, seed: int) -> list[Memory]:
    """`n` memories of two types in Zipf-distributed prose, with planted near duplicates: a word
    changed, a word dropped, punctuation, a sentence added, and chains of edits of one memory."""
    rng = random.Random(seed)
    lexicon = ["".join(rng.choice("abdeiklmnoprstu") for _ in range(rng.randint(2, 9))) for _ in range(1500)]
    weights = [1.0 / (r + 1) for r in range(len(lexicon))]

    def prose(k: int) -> list[str]:
        return rng.choices(lexicon, weights, k=k)

    out: list[Memory] = []
    while len(out) < n:
        typ = rng.choice(["feedback", "project"])
        words = prose(rng.randint(8, 90))
        out.append(mem(f"m{len(out)}", typ, " ".join(words[:5]), " ".join(words[5:]), rng.uniform(0, 1e6)))
        for _ in range(rng.choice([0, 0, 0, 1, 1, 3])):
            edit = list(words)
            kind = rng.randrange(4)
            at = rng.randrange(len(edit))
            if kind == 0:
                edit[at] = rng.choice(lexicon)
            elif kind == 1 and len(edit) > 1:
                del edit[at]
            elif kind == 2:
                edit.insert(at, rng.choice(lexicon))
            else:
                edit += prose(rng.randint(1, 6))
            out.append(mem(f"m{len(out)}", typ, " ".join(edit[:5]), " ".join(edit[5:]) + "!", rng.uniform(0, 1e6)))
            words = edit
    return out[:n]


def _exhaustive_groups(memories: list[Memory], threshold: float = 0.85) -> list[list[str]]:
    """near_duplicate_groups as an all-pairs scan: the same greedy, every earlier anchor compared."""
    groups: list[list[str]] = []
    for typ in dict.fromkeys(m.type for m in memories):
        order = sorted((m for m in memories if m.type == typ), key=lambda m: (-m.mtime, m.path.name))
        docs = [tokens(f"{m.description}\n{m.body}") for m in order]
        members: dict[int, list[int]] = {}
        for i in range(len(order)):
            home = next((k for k in members if docs[k] and docs[i] and similarity(docs[k], docs[i]) >= threshold), None)
            members.setdefault(i if home is None else home, []).append(i)
        groups += [[order[j].name for j in g] for g in members.values() if len(g) > 1]
    return groups


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_groups_on_a_generated_corpus_are_those_of_an_exhaustive_scan(seed: int) -> None:
    """Same merged groups as comparing every pair, on prose with planted edits and edit chains."""
    memories = _corpus(700, seed)
    got = [[m.name for m in g] for g in near_duplicate_groups(memories)]
    want = _exhaustive_groups(memories)
    assert sorted(got) == sorted(want)
    assert sum(len(g) for g in want) > 100  # the corpus does plant near duplicates


def test_candidate_pairs_follow_the_duplicates_not_the_square_of_the_memories() -> None:
    """On 2,000 memories of prose the filter proposes only pairs that can reach the threshold
    (an all-pairs scan would compare two million; the old prefix filter proposed thousands)."""
    memories = [m for m in _corpus(2000, 9) if m.type == "project"]
    docs = [tokens(f"{m.description}\n{m.body}") for m in memories]
    cands = _candidates(docs, 0.85)
    pairs = sum(len(v) for v in cands.values())
    similar = sum(1 for i, js in cands.items() for j in js if similarity(docs[i], docs[j]) >= 0.85)
    assert pairs <= 2 * similar + 10, (pairs, similar)


def _regex_tokens(text: str) -> list[str]:
    import unicodedata  # noqa: PLC0415 - the reference only

    from jobs.dream.duplicates import _TOKEN  # noqa: PLC0415 - the reference only
    return _TOKEN.findall(unicodedata.normalize("NFKC", text).casefold())


@hsettings(max_examples=300, deadline=None)
@given(st.text(st.characters(max_codepoint=127), max_size=60) | st.text(max_size=30))
def test_ascii_words_are_those_the_regex_finds(text: str) -> None:
    """ASCII text is split by a byte table, not the regex: the same words, any punctuation,
    control character, digit or case (and non-ASCII text still goes through the regex)."""
    assert tokens(text) == _regex_tokens(text)
    assert tokens(text + "é") == _regex_tokens(text + "é")
