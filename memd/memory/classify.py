"""The offline sentence rules: is a sentence a durable statement, of which type and scope, and its name.

Pure functions of text over regex tables, no I/O. Shared by the offline provider's
extraction (`jobs.extract.offline`) and the user's own writes (`memd.write.control`,
which files `memd remember` text by them), which is why they live below both.
Judged on labelled statements by bench/bench_offline.py (figures in bench/RESULTS.md).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

from memd.memory.names import token_like

_SENT = re.compile(r"(?<=[.!?。！？])\s+|\n+")

_URL = re.compile(r"https?://[^\s)>\]]+")

_PLACEHOLDER = re.compile(r"\[REDACTED:[^\]\s]{0,60}\]")

_I = re.IGNORECASE

# A turn that asks not to be remembered keeps nothing at all.
DONT_KEEP = re.compile(
    r"\b(don'?t|do not|never|please don'?t)\s+(remember|save|store|keep|memori[sz]e|note)\s+(this|that|it|these)\b"
    r"|\bnot (for|to be) (remembered|memory|saved)\b|\boff the record\b|\bforget (this|that|what I said)\b|不要记",
    _I,
)

_QUESTION_START = re.compile(
    r"^(what|what's|whats|how|why|where|when|which|who|whose|is|are|was|were|do|does|did|can|could|would|will|"
    r"should|shall|may|might|have|has|any|remind me)\b",
    _I,
)

# A polite request is an instruction, not a question: "Could you always run the linter first?"
_REQUEST = re.compile(r"^(can|could|would|will) you (please )?(always|never|from now on|remember)\b", _I)

_TEMPORARY = re.compile(
    r"\b(for now|just this once|this once|this time|right now|at the moment|currently|temporarily|today|tonight|"
    r"for (this|the) (pr|change|commit|task|run|session|ticket|one|file)|in this (pr|pull request|commit|change|branch)|"
    r"until (tomorrow|later|further notice)|yet)\b",
    _I,
)

_REMEMBER = re.compile(
    r"^(please |also |and |oh,? )?(remember|keep in mind that|keep in mind:|note that|for future reference|"
    r"fyi,? going forward|just so you know)\b|\balways remember\b|记住|请记",
    _I,
)

# Generality: the statement is meant beyond this one task.
_GENERAL = re.compile(
    r"\b(from now on|going forward|in (the )?future|every time|whenever|don'?t ever|do not ever|by default|"
    r"as a rule|at all times|everywhere|in (every|any|all (of )?(my|our)?) ?(projects?|repos?|repositories|codebases?)|"
    r"for all (my|our) (projects|repos|repositories)|across (all )?(my |our )?(projects|repos))\b|总是|永远不要|不要再|以后",
    _I,
)

_ALWAYS_NEVER = re.compile(r"\b(always|never)\b", _I)

# What may stand right before always/never in a rule (else it describes something: "it always crashes").
_RULE_LEAD = re.compile(
    r"(^|[;:,—(]|\b(and|but|so|then|please|here|we|i|must|should|to|just|also|you should|you must)"
    r"(\s+(now|still|also|really))?)\s*$", _I
)

_PAST = re.compile(
    r"^(\w+ed|thought|knew|said|meant|saw|had|was|were|got|did|made|went|found|told|heard|understood|wrote|ran|"
    r"mind|been)\b",
    _I,
)

_STOP_DOING = re.compile(
    r"^(please )?stop \w+ing\b|\b(don'?t|do not|stop)\b.*\b(so much|so often|all the time|constantly)\b", _I
)

_DECISION = re.compile(
    r"\bwe('ve| have)? (decided|agreed|chose|picked|settled on|standardi[sz]ed|switched|moved|migrated|"
    r"use|deploy|release|require|only|don'?t|do not|no longer|never|always|prefer|follow|ship|run|host|keep|"
    r"squash|rebase|tag|vendor|pin)\b"
    r"|\bwe('re| are) (migrating|moving|switching|standardi[sz]ing|phasing out|deprecating|dropping)\b"
    r"|\bour (convention|policy|contract|rule|standard|process|approach|stack|style)\b|(我们|已经|团队)决定|决定了|我们(用|使用)",
    _I,
)

# A constraint: something must (not) hold, said of the project rather than asked of the agent now.
_MUST = re.compile(r"^(?!you\b)(?!please\b)[\w' -]{2,60}\b(must|has to|have to|needs to|need to) (not )?(be|stay|support|go|run|work|use|keep|pass|remain|target)\b", _I)

_SCHEDULE = re.compile(
    r"\b(every (day|night|morning|evening|week|month|sprint|release|monday|tuesday|wednesday|thursday|friday|"
    r"saturday|sunday)|nightly|weekly|daily|each (day|night|week))\b",
    _I,
)

_PREFER = re.compile(
    r"\bI (really |strongly |much )?(prefer|like|love|hate|dislike|can'?t stand|find)\b|\bI('d| would) rather\b"
    r"|^prefer\b|(我|我更)(喜欢|习惯|讨厌)(?!(第.|这个|那个|你的))",
    _I,
)

# A preference about one choice on the table, or praise, is not a long-term preference.
_ONE_OFF_OBJECT = re.compile(
    r"^\s*(it|this|that|these|those|them|yours?|how|what you|the way you)\b"
    r"|^(\W*\w+){0,5}?\W*\b(option|version|variant|one better|one you|you (proposed|suggested|showed|wrote|did))\b"
    r"|^\s*the (first|second|third|last|latter|former|other|new|old|blue|red|green) (one|option|version)\b",
    _I,
)

# "Don't use abbreviations like cfg": a prohibition about a kind of thing, not about the thing at hand.
_DONT_KIND = re.compile(
    r"^(no,?\s+)?(please\s+)?(don'?t|do not) (use|add|write|put|leave|create|mock|commit|push|log|hardcode|"
    r"introduce|rely on|import|print|return|catch|swallow|ignore) (?!(the|this|that|it|these|those|a|an|any\w*|"
    r"something|everything|more|other|another|one|them|my|your|its)\b)(\w+ )?\w+s\b",
    _I,
)

# Where something of the project is: "the tests live in spec/, in this project", "our main database is
# Postgres 15", "the default branch here is develop" (said of the project, not of a moment: no -ing).
_WHERE = re.compile(
    r"^(?!.*\b\w+ing\b)(?=.*(\bin this (repo|repository|project|codebase)\b|\bhere\b|^(actually,? )?our\b))"
    r".*\b(lives?|are|is|go(es)?|sits?)\s+(in|under|at|on|named|called)?\s*[\w./-]+",
    _I,
)

# Where a kind of thing is kept: "incidents are written up in Confluence", "feature requests are tracked in
# GitHub issues", "the architecture doc is docs/architecture.md".
_KEPT_IN = re.compile(
    r"\b(are|is) (tracked|kept|logged|filed|written up|documented|managed|recorded)\b.*\b(in|on)\b"
    r"|\b(docs?|runbook|guide|spec|handbook) (is|are|lives?) (in |at )?[\w-]+/[\w./-]+",
    _I,
)

# Chinese markers: a must ("一定要", "必须", "每次都要") and a role ("我是后端工程师").
_ZH_MUST = re.compile(r"一定要|必须|每次都要|务必")
_ZH_ROLE = re.compile(r"我是.{0,12}(工程师|开发者?|程序员|设计师|学生|经理|架构师|研究员|运维)")

_ROLE_NOUNS = (
    r"(developer|engineer|programmer|person|designer|scientist|student|maintainer|lead|manager|sre|devops|admin|"
    r"architect|researcher|analyst|beginner|newbie|expert|consultant|founder|owner|freelancer|contractor|intern|"
    r"newcomer|dev|hacker|tester|writer|teacher)"
)

_ROLE = re.compile(
    r"\bI('m| am) (a |an |the |the only |mostly |mainly |primarily |really |pretty |quite )*([\w+#/.-]+ ){0,3}"
    + _ROLE_NOUNS + r"s?\b"
    r"|\bI('m| am) new to\b|\bmy (role|background|job|title|day job|first language|native language)\b"
    r"|\bI('m| am) (colou?r-?blind|dyslexic|visually impaired|left-handed)\b"
    r"|\bI (usually|mostly|mainly|normally|typically) (work|code|use|write|develop)\b"
    r"|\bI work (mostly|mainly|primarily) (in|with|on)\b",
    _I,
)

_POINTER = re.compile(
    r"\b(board|tickets?|docs?|documentation|wiki|dashboard|runbook|tracker|tracked|issues are|jira|linear|notion|"
    r"confluence|grafana|sentry|error tracking|status page|style ?guide|handbook|playbook|postmortems?|specs?|"
    r"design docs?)\b",
    _I,
)

_POINTER_TASK = re.compile(r"\b(tell me|what'?s wrong|here'?s|here is|stack ?trace|paste|look at|check out this)\b", _I)

_GLOBAL_WORDS = re.compile(
    r"\b(in (every|any|all (of )?(my|our)?) ?(projects?|repos?|repositories|codebases?)|"
    r"for all (my|our) (projects|repos|repositories)|across (all )?(my |our )?(projects|repos)|everywhere|"
    r"whatever the project|no matter the project|in general)\b",
    _I,
)

_PROJECT_WORDS = re.compile(
    r"\b(this|the|our) (repo|repository|project|codebase|service|app|monorepo|module|package|team|product)\b"
    r"|\bhere\b|\bin this\b|\bwe\b|\bour\b|\bus\b"
    r"|\b(main|master|trunk|develop) branch\b|\b(to|on|into|from) (main|master|trunk)\b|\bPRs?\b|\bpull requests?\b"
    r"|\bCI\b|\bpipeline\b|\bdeploy(s|ed|ing|ment)?\b|\bstaging\b|\bproduction\b|\bprod\b|\bmigrations?\b"
    r"|\bAPI\b|\bendpoints?\b|\bschema\b|\bMakefile\b|\bmake \w+|\bchangelog\b"
    r"|\b[\w.-]+\.(ya?ml|json|toml|py|go|ts|tsx|js|rs|proto|sql|md|cfg|ini)\b|\b\w+/\w+[\w/]*\b"
    r"|这个项目|本项目|这个仓库",
    _I,
)

_THIS_PROJECT = re.compile(
    r"\b(this|our) (repo|repository|project|codebase|service|app|monorepo|team|product)\b|\bhere\b|\bwe\b|\bour\b"
    r"|这个项目|本项目|这个仓库",
    _I,
)

_FIRST_PERSON = re.compile(r"\b(I|I'm|I've|I'd|my|me|mine)\b|我(?!们)", _I)

_CJK = re.compile(r"[\u4e00-\u9fff]")

_LEAD = re.compile(
    r"^((please|also|and|oh|so|ok|okay|fyi|btw|heads up|just so you know|for future reference)[,:!]?\s+)*"
    r"(remember( that)?[,:]?|keep in mind( that)?[,:]?|note( that)?[,:]?|always remember( that)?[,:]?)?\s*",
    _I,
)

_CLAUSE = re.compile(r"\s*(;|—|–| - |:\s)\s*")

_STOP = frozenset([
    "a", "an", "the", "and", "or", "but", "to", "of", "in", "on", "for", "with", "that", "this", "it", "is",
    "are", "be", "we", "i", "you", "our", "my", "me", "please", "remember", "dont", "don't", "do", "just",
    "so", "as", "at", "by", "from", "m", "s", "t", "re", "ll", "ve", "d", "no", "note", "keep", "mind", "also",
    "i'm", "i'd", "we're", "we've", "it's", "that's", "there", "then", "when", "if", "all", "any", "your",
])


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENT.split(text) if len(s.strip()) >= 8 or _CJK.search(s)]


def is_chinese(text: str) -> bool:
    """Whether a statement is written in Chinese (a memory of it is then written in Chinese, issue 26):
    at least two Chinese characters and no fewer of them than Latin words ("用 pytest 跑测试" is
    Chinese; "name it 中文 in the docs" is not)."""
    cjk = len(_CJK.findall(text))
    return cjk >= max(2, len(re.findall(r"[A-Za-z]+", text)))


def is_question(sentence: str) -> bool:
    s = sentence.strip().rstrip("\"')]*_` ")
    if _REQUEST.search(s):
        return False
    return s.endswith(("?", "？")) or bool(_QUESTION_START.search(s) and not s.endswith((".", "!", "。")))


def _rule(sentence: str) -> bool:
    """always/never used as a rule, not to describe what something does ("it always crashes")."""
    for m in _ALWAYS_NEVER.finditer(sentence):
        before, after = sentence[: m.start()], sentence[m.end() :].lstrip()
        if _RULE_LEAD.search(before) and not _PAST.search(after):
            if re.search(r"\byou\s*$", before, _I):
                continue
            return True
    return False


def classify(sentence: str) -> tuple[str, str] | None:
    """(kind, type) of a durable statement, or None for anything else."""
    s = sentence.strip()
    if is_question(s) or _TEMPORARY.search(s) or re.match(r"^never ?mind\b", s, _I):
        return None
    url = _URL.search(s)
    if url and _POINTER_TASK.search(s):
        return None
    if _REMEMBER.search(s):
        return "remember", _type_of_remembered(s, bool(url))
    if url and _POINTER.search(s):
        return "pointer", "reference"
    if _DECISION.search(s):
        return "decision", "reference" if url else "project"
    general = _GENERAL.search(s)
    if _rule(s) or _STOP_DOING.search(s) or _DONT_KIND.search(s):
        return "rule", "project" if re.search(r"\bwe\b|我们", s, _I) else "feedback"
    if _ROLE.search(s) or _ZH_ROLE.search(s):
        return "role", "user"
    if any(not _ONE_OFF_OBJECT.search(s[m.end() :]) for m in _PREFER.finditer(s)):
        return "preference", "user"  # "I prefer short answers, in every project": still about the user
    if general:
        return "rule", "project" if re.search(r"\bwe\b|我们", s, _I) else "feedback"
    if _MUST.search(s) or _SCHEDULE.search(s) or _ZH_MUST.search(s):
        return "constraint", "project"
    if _KEPT_IN.search(s):
        return "pointer", "reference"
    if _WHERE.search(s):
        return "fact", "project"
    return None


def _type_of_remembered(s: str, url: bool) -> str:
    """A request to remember says what, not which kind: a link, something about the user, a rule, a fact."""
    if url:
        return "reference"
    if _FIRST_PERSON.search(s):
        return "user" if (_PREFER.search(s) or _ROLE.search(s)) else "feedback"
    if _rule(s) and not re.search(r"\bwe\b", s, _I):
        return "feedback"
    return "project"


def project_names(key: str) -> list[str]:
    """What a user may call the project of memory key `key` (a path with "/" turned into "-"): its last
    one, two or three dash-separated parts ("-home-dev-my-app" → "app", "my-app", "dev-my-app"), each of
    at least three letters."""
    parts = [p for p in key.strip("-").split("-") if p]
    return [n for n in ("-".join(parts[-k:]) for k in (1, 2, 3) if len(parts) >= k) if len(n) >= 3]


def _names_project(sentence: str, projects: list[str]) -> bool:
    """The sentence says which project it is about by name: "in spotter we …", "for spotter, always …"."""
    return any(re.search(rf"\b(in|for|of|on|at)\s+{re.escape(n)}\b", sentence, _I) for n in projects)


def scope_of(mtype: str, sentence: str, projects: list[str] | None = None) -> str:
    """User and feedback memories not tied to this project go to the global drawer (§3.2); an explicit
    "in every project" wins over any project word in the same sentence, and naming the project
    (`projects`: what it may be called, `project_names`) ties a rule to it."""
    if mtype in ("project", "reference"):
        return "project"
    if _GLOBAL_WORDS.search(sentence):
        return "global"
    if projects and _names_project(sentence, projects):
        return "project"
    if mtype == "user":  # about the person: only an explicit "this project"/"we" ties it to the project
        return "project" if _THIS_PROJECT.search(_URL.sub(" ", sentence)) else "global"
    return "project" if _PROJECT_WORDS.search(_URL.sub(" ", sentence)) else "global"


def _plain(sentence: str) -> str:
    """The sentence without redaction placeholders: nothing is named after a secret, not even its rule."""
    return " ".join(_PLACEHOLDER.sub(" ", sentence).split())


# Words that say how a statement was made, not what it is about: a name reads as a person's would
# ("use-ecto-multi-multi-step-writes", not "now-always-use-ecto.multi-multi-step").
_NAME_FILLER = frozenset([
    "now", "from", "going", "forward", "future", "always", "please", "actually", "correction", "repo",
    "repository", "project", "codebase", "here", "ok", "okay", "fyi", "btw", "heads", "up", "reference",
    "let", "lets", "each", "every", "whenever", "default",
])

NAME_WORDS = 5


def _name_words(sentence: str) -> list[str]:
    """The content words a name is made of, in order: no URL, placeholder, key-shaped token, stop word
    or filler; a run of Chinese characters counts as one word."""
    sentence = _URL.sub(" ", _plain(sentence))
    raw = re.findall(r"[A-Za-z0-9][A-Za-z0-9+#.-]*|[\u4e00-\u9fff]{2,}", sentence)
    words = [w.rstrip(".-").replace(".", "-").lower() for w in raw if not token_like(w)]
    return [w for w in words if w and w not in _STOP and w not in _NAME_FILLER]


def name_for(sentence: str) -> str:
    """Up to five content words of the (redacted) sentence; never a URL, a placeholder or anything
    shaped like a key (a token no detector knows would otherwise become a file name)."""

    return "-".join(_name_words(sentence)[:NAME_WORDS]) or "note"


def names_for(sentence: str) -> list[str]:
    """`name_for`'s name, then the names the write path tries when that one is taken by a different
    statement: the first four content words with the last one, two, … (where statements that share
    their opening usually differ: "run-linter-suite-warnings-commit" / "…-push")."""
    words = _name_words(sentence)
    out = [name_for(sentence)]
    for k in range(1, len(words) - NAME_WORDS + 2):
        name = "-".join(words[: NAME_WORDS - 1] + words[-k:])
        if name not in out:
            out.append(name)
    return out


_QUOTES = str.maketrans({"“": '"', "”": '"', "‘": "'", "’": "'", "`": "", "*": "", "_": " "})


def normalised(text: str) -> str:
    """A statement as compared for "the same statement again": case, width, quotes, markup,
    whitespace and the punctuation at its ends do not count; the words and their order do."""
    s = unicodedata.normalize("NFKC", _plain(text)).translate(_QUOTES).casefold()
    return " ".join(s.split()).strip(" .!。！,，;；:：-—–")


def statement_digest(text: str) -> str:
    """A short digest of `normalised(text)`, kept in a memory's metadata (`statement`) so a later
    re-statement is recognised whatever the memory was named."""
    return hashlib.blake2b(normalised(text).encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def _capital(s: str) -> str:
    return s[:1].upper() + s[1:] if s else s


def describe(sentence: str) -> tuple[str, str]:
    """(description, rest): the statement's first clause as the one-line description, and what follows it
    (often the user's reason), so the body adds to the description instead of repeating it."""
    s = _LEAD.sub("", sentence.strip(), count=1) or sentence.strip()
    s = _capital(s)
    parts = _CLAUSE.split(s, maxsplit=1)
    head, rest = (parts[0], parts[2]) if len(parts) == 3 and len(parts[0]) >= 15 and len(parts[2]) >= 8 else (s, "")
    if _URL.search(rest) and not _URL.search(head):
        head, rest = s, ""  # a pointer's description keeps its link: MEMORY.md is where it is looked up
    head = head.rstrip(" ,;:—–-")
    if len(head) > 150:
        cut = head[:147].rsplit(" ", 1)[0]
        rest = (head[len(cut) :].strip() + (" " + rest if rest else "")).strip()
        head = cut + "…"
    return head, _capital(rest)
