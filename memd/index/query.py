"""memd's search query syntax: what a person types, turned into one FTS5 MATCH that never fails.

FTS5's own syntax surprises people: `C++` is an error, `-credo` a column filter, a lone `*` an
error, `NOT` at the start an error. So memd does not pass a query to FTS5; it parses its own small
syntax (SPEC §17) and always builds a MATCH string from quoted phrases, which FTS5 cannot reject.

The syntax (also in `memd search --help` and the README):

    deploy friday        any of the words; memories holding more of them rank first
    "never deploy"       the words in this order
    deplo*               words starting with deplo
    -staging, NOT x      leave out memories holding the word (a phrase: -"exact words")
    a AND b              both words required
    a OR b               either word (what plain words mean anyway)
    name:tabs            the word in one field: name:, description: (desc:), body:

Words are matched by their stem (`deploys` finds `deploy`, `Fridays` finds `friday`); Chinese and
Japanese match as runs of characters; `C++` is the token `c++`. Anything else — parentheses,
`^`, a lone `*`, an unknown `field:` — is not an operator: it is said in one note and the words
around it are searched. A query with nothing to look for is an `error` (one line), never an
exception.

Pure: no SQLite, no I/O. `segment` is passed in so this module does not import the reader.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["CJK_STOP", "FIELDS", "SPACELESS", "STOPWORDS", "ParsedQuery", "parse_query", "run_pairs", "sentence_pieces",
           "spaceless_run"]  # fmt: skip

FIELDS = {"name": "name", "description": "description", "desc": "description", "body": "body"}
_OPERATORS = frozenset({"AND", "OR", "NOT"})
# A word as the index tokenizes it: letters, digits, marks, and '+' (tokenchars, so C++ is a word).
_WORD = re.compile(r"[\w+]+")
_CHUNK = re.compile(r'(?P<sign>-?)(?:(?P<field>[A-Za-z]+):)?(?:"(?P<phrase>[^"]*)"?(?P<pstar>\*?)|(?P<bare>[^\s"]+))')

STOPWORDS = frozenset((
    "a", "about", "above", "after", "again", "against", "all", "also", "am", "an", "and", "any", "are", "aren",
    "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can",
    "cannot", "could", "couldn", "did", "didn", "do", "does", "doesn", "doing", "don", "down", "during", "each",
    "few", "for", "from", "further", "had", "hadn", "has", "hasn", "have", "haven", "having", "he", "her", "here",
    "hers", "herself", "him", "himself", "his", "how", "i", "if", "in", "into", "is", "isn", "it", "its", "itself",
    "just", "let", "lets", "me", "more", "most", "my", "myself", "no", "nor", "not", "now", "of", "off", "on",
    "once", "only", "or", "other", "our", "ours", "ourselves", "out", "over", "own", "same", "she", "should",
    "so", "some", "such", "than", "that", "the", "their", "theirs", "them", "themselves", "then", "there",
    "these", "they", "this", "those", "through", "to", "too", "under", "until", "up", "very", "was", "we",
    "were", "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would", "you",
    "your", "yours", "yourself", "yourselves", "please", "thanks", "thank", "hey", "hello", "okay", "yes",
    "yeah", "sure", "want", "wants", "need", "needs", "tell", "show", "give", "get", "got", "like", "might",
    "must", "shall", "may", "still", "even", "really", "maybe", "s", "t",
))  # fmt: skip


@dataclass(frozen=True)
class ParsedQuery:
    """A query as memd understood it.

    `match` is the FTS5 MATCH string ("" when `error` is set); `plain` says the query used no
    operator, phrase, prefix or field, so a search that finds nothing may retry its words as
    prefixes; `words` are those plain words; `notes` say, one line each, what was not taken as an
    operator; `error` says why there is nothing to search for.
    """

    match: str
    plain: bool
    words: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())
    error: str | None = None


@dataclass
class _Clause:
    """One clause of a parsed query: its FTS expression, how it counts, and its bare word."""

    expr: str
    kind: str  # "should" | "must" | "not"
    word: str | None = None  # a plain, unsigned, unfielded bare word


# Scripts written without spaces (kept in step with memd/index/search.py's segmentation).
SPACELESS = (
    "\u0e00-\u0eff"  # Thai, Lao
    "\u1000-\u109f"  # Myanmar
    "\u1780-\u17ff"  # Khmer
    "\u3040-\u30ff"  # Hiragana, Katakana
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uac00-\ud7af"  # Hangul syllables
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\uff66-\uff9f"  # half-width Katakana
    "\U00020000-\U0003134f"  # CJK extensions B-G
)


@functools.cache
def spaceless_run() -> re.Pattern[str]:
    """Runs of SPACELESS, compiled on first use (the class takes milliseconds to compile); search and
    offline recall share it."""
    return re.compile(f"[{SPACELESS}]+")


# Characters of spaceless scripts that rarely carry a topic (particles, pronouns, question words).
CJK_STOP = frozenset("的了是在我你他她它们吗呢吧啊和与就都也还这那有个么怎什请把被给要会能可以为")


def run_pairs(run: str) -> list[str]:
    """A run of spaceless-script characters as its overlapping character pairs, leaving out pairs
    with a particle or pronoun; a run of one character is itself unless it is one. The one rule for
    search (`sentence_pieces`) and offline recall (`memd.agent.candidates.content_terms`)."""
    if len(run) == 1:
        return [] if run in CJK_STOP else [run]
    return [run[i : i + 2] for i in range(len(run) - 1) if not (set(run[i : i + 2]) & CJK_STOP)]


def sentence_pieces(word: str) -> list[str] | None:
    """A word holding a run of three or more spaceless-script characters (a Chinese sentence
    typed as one word) as searchable pieces: its other parts, and the run's overlapping
    character pairs without a particle or pronoun. None for any other word (searched whole)."""
    if word.isascii():  # the common case, without compiling the scripts' class
        return None
    runs = list(spaceless_run().finditer(word))
    if not any(len(m.group()) >= 3 for m in runs):
        return None
    pieces: list[str] = []
    pos = 0
    for m in runs:
        if word[pos : m.start()].strip("_+"):
            pieces.append(word[pos : m.start()])
        pieces += run_pairs(m.group())
        pos = m.end()
    if word[pos:].strip("_+"):
        pieces.append(word[pos:])
    return list(dict.fromkeys(pieces)) or None


def _phrase(words: list[str], segment: Callable[[str], str], prefix: bool = False) -> str:
    return '"' + segment(" ".join(words)) + '"' + ("*" if prefix else "")


def _words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w.strip("+")]


def _term(m: re.Match[str], segment: Callable[[str], str], notes: list[str]) -> tuple[str | None, str | None, bool]:
    """(FTS5 expression, the plain word it is or None, whether it used syntax) for one chunk."""
    fld, phrase, bare = m.group("field"), m.group("phrase"), m.group("bare")
    column = None
    if fld is not None:
        column = FIELDS.get(fld.lower())
        if column is None:
            notes.append(f"{fld}: is not a field (name:, description:, body:); searched for the words")
            bare = f"{fld} {bare or phrase or ''}"
            phrase = None
    if phrase is not None:
        words = _words(phrase)
        expr = _phrase(words, segment, prefix=bool(m.group("pstar"))) if words else None
        syntax = True
    else:
        text = bare or ""
        prefix = bool(re.search(r"[\w+]\*+$", text))
        if "*" in text and not prefix:
            notes.append("a * only means a prefix after letters (deplo*)")
        words = _words(text)
        if not words:
            return None, None, False
        expr = _phrase(words, segment, prefix)
        syntax = prefix
        if not prefix and re.search(r"[^\w+*]", text) and fld is None:
            odd = "".join(sorted({c for c in text if not (c.isalnum() or c in "_+*")}))
            if odd.strip("-'.,/"):
                notes.append(f"{odd!s} is not an operator here; searched for the words")
    if expr is None:
        return None, None, False
    if column is not None:
        return f"{column} : {expr}", None, True
    word = words[0] if len(words) == 1 and not syntax else None
    return expr, word, syntax


def _sentence(m: re.Match[str]) -> list[str] | None:
    """The pieces of a plain bare chunk holding a spaceless-script sentence, else None."""
    if m.group("sign") or m.group("field") or m.group("bare") is None or m.group("bare").endswith("*"):
        return None
    words = _words(m.group("bare"))
    split = [sentence_pieces(w) for w in words]
    if all(p is None for p in split):
        return None
    return [piece for w, p in zip(words, split) for piece in (p if p is not None else [w])]


def parse_query(query: str, segment: Callable[[str], str] = lambda s: s) -> ParsedQuery:
    """Parse `query` (see the module docstring); never raises."""
    notes: list[str] = []
    clauses: list[_Clause] = []
    syntax = False
    pending_not = False
    pending_and = False
    for m in _CHUNK.finditer(query):
        raw = m.group(0)
        if raw in _OPERATORS:
            syntax = True
            if raw == "NOT":
                pending_not = True
            elif raw == "AND":
                if clauses and clauses[-1].kind == "should":
                    clauses[-1].kind = "must"
                pending_and = bool(clauses)
            continue
        pieces = _sentence(m)
        if pieces is not None and not pending_not and not pending_and:
            clauses += [_Clause(_phrase([p], segment), "should", p) for p in pieces]
            continue
        expr, word, used = _term(m, segment, notes)
        if expr is None:
            continue
        if m.group("sign") == "-":
            used = True
        syntax = syntax or used
        if pending_not or m.group("sign") == "-":
            clauses.append(_Clause(expr, "not"))
        else:
            clauses.append(_Clause(expr, "must" if pending_and else "should", word))
        pending_not = pending_and = False
    if pending_not or pending_and:
        notes.append("an operator at the end of the query has nothing to act on and was left out")
    return _build(clauses, syntax, notes, segment)


def _build(clauses: list[_Clause], syntax: bool, notes: list[str], segment: Callable[[str], str]) -> ParsedQuery:
    should = [c for c in clauses if c.kind == "should"]
    must = [c for c in clauses if c.kind == "must"]
    nots = [c for c in clauses if c.kind == "not"]
    if not syntax:
        content = [c for c in should if c.word is None or c.word not in STOPWORDS]
        # Adjacent words as typed, when one of them tells something ("on call" finds "on-call"):
        # a memory holding the pair ranks above one holding the word alone.
        pairs = [_Clause(_phrase([a.word, b.word], segment), "should") for a, b in zip(should, should[1:])
                 if a.word and b.word and (a.word not in STOPWORDS or b.word not in STOPWORDS)]  # fmt: skip
        should = (content + pairs) if content else should
    if not should and not must:
        why = "only words to leave out" if nots else "no word to search for"
        return ParsedQuery("", False, notes=tuple(notes), error=f"the query has {why}")
    exprs = list(dict.fromkeys(c.expr for c in must))
    positive = " AND ".join(exprs)
    if should:
        group = " OR ".join(dict.fromkeys([c.expr for c in should] + exprs))
        positive = f"{positive} AND ({group})" if positive else group
    match = positive
    if nots:
        match = f"({positive}) NOT (" + " OR ".join(dict.fromkeys(c.expr for c in nots)) + ")"
    words = tuple(c.word for c in should if c.word is not None)
    return ParsedQuery(match, not syntax, words, tuple(dict.fromkeys(notes)))
