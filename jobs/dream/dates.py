"""Relative dates made absolute ("tomorrow" → "on 2026-11-28"), English and common Chinese words. Pure."""

from __future__ import annotations

import re
from datetime import date, timedelta

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_PREPOSITIONS = frozenset((
    "on", "by", "until", "till", "since", "before", "after", "from", "of", "for",
    "through", "to", "at", "during", "in", "within", "than", "as",
))
_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.DOTALL)
_EN_DATES = re.compile(
    r"\b(?:(?P<dby>the day before yesterday)|(?P<dat>the day after tomorrow)"
    r"|(?P<ago>(?P<agon>\d{1,3}) days? ago)|(?P<inn>in (?P<innn>\d{1,3}) days?)"
    r"|(?P<rel>(?P<relw>last|next|this) (?P<unit>week|month|" + "|".join(_WEEKDAYS) + r"))"
    r"|(?P<word>today|tonight|yesterday|tomorrow))\b(?P<poss>'s)?",
    re.IGNORECASE,
)
_ZH_DATES = re.compile(r"大前天|前天|昨天|今天|今日|明天|后天|上周|上星期|下周|下星期|上个月|下个月")
_ZH_DAY = {"大前天": -3, "前天": -2, "昨天": -1, "今天": 0, "今日": 0, "明天": 1, "后天": 2}
_ZH_WEEK = {"上周": -7, "上星期": -7, "下周": 7, "下星期": 7}
_ZH_MONTH = {"上个月": -1, "下个月": 1}
_PREV_WORD = re.compile(r"([A-Za-z]+)\W*$")


def _monday(d: date) -> date:
    return d - timedelta(days=d.weekday())


def _month(d: date, shift: int) -> str:
    y, m = divmod(d.year * 12 + d.month - 1 + shift, 12)
    return f"{y:04d}-{m + 1:02d}"


def _weekday(d: date, which: str, wd: int) -> date:
    """`last`: most recent strictly before; `next`: first strictly after; `this`: in d's week."""
    if which == "last":
        return d - timedelta(days=(d.weekday() - wd - 1) % 7 + 1)
    if which == "next":
        return d + timedelta(days=(wd - d.weekday() - 1) % 7 + 1)
    return _monday(d) + timedelta(days=wd)


def _en_phrase(m: re.Match[str], d: date) -> tuple[str, str]:
    """(absolute phrase, preposition to put before it when none is there)."""
    g = m.groupdict()
    if g["dby"]:
        return (d - timedelta(days=2)).isoformat(), "on"
    if g["dat"]:
        return (d + timedelta(days=2)).isoformat(), "on"
    if g["ago"]:
        return (d - timedelta(days=int(g["agon"]))).isoformat(), "on"
    if g["inn"]:
        return (d + timedelta(days=int(g["innn"]))).isoformat(), "on"
    if g["rel"]:
        which, unit = g["relw"].lower(), g["unit"].lower()
        if unit == "week":
            shift = {"last": -7, "next": 7, "this": 0}[which]
            return f"the week of {_monday(d + timedelta(days=shift)).isoformat()}", "in"
        if unit == "month":
            return _month(d, {"last": -1, "next": 1, "this": 0}[which]), "in"
        wd = _WEEKDAYS.index(unit)
        return f"{unit.capitalize()} {_weekday(d, which, wd).isoformat()}", "on"
    word = g["word"].lower()
    if word == "tonight":
        return f"the evening of {d.isoformat()}", "on"
    return (d + timedelta(days={"yesterday": -1, "today": 0, "tomorrow": 1}[word])).isoformat(), "on"


def _absolutize_prose(text: str, d: date) -> tuple[str, int]:
    count = 0

    def en(m: re.Match[str]) -> str:
        nonlocal count
        count += 1
        phrase, prep = _en_phrase(m, d)
        if m.group("inn"):
            prep = "on"
        before = _PREV_WORD.search(text[max(0, m.start() - 24) : m.start()])
        has_prep = before is not None and before.group(1).lower() in _PREPOSITIONS
        if m.group("poss"):
            out = phrase + "'s"
        elif has_prep and not m.group("inn"):
            out = phrase
        else:
            out = f"{prep} {phrase}"
        return out[0].upper() + out[1:] if m.group(0)[0].isupper() else out

    def zh(m: re.Match[str]) -> str:
        nonlocal count
        count += 1
        w = m.group(0)
        if w in _ZH_DAY:
            return (d + timedelta(days=_ZH_DAY[w])).isoformat()
        if w in _ZH_WEEK:
            return f"{_monday(d + timedelta(days=_ZH_WEEK[w])).isoformat()} 那一周"
        return _month(d, _ZH_MONTH[w])

    text = _EN_DATES.sub(en, text)
    return _ZH_DATES.sub(zh, text), count


# Every English expression `_EN_DATES` matches holds one of these (lower-cased); the Chinese ones
# are not ASCII. So ASCII text without any of them has nothing to replace (checked against the
# regexes in tests/jobs/dream/test_dates.py). Not for other text: IGNORECASE matches `K` (Kelvin) as k.
_DATE_WORDS = ("day", "tonight", "tomorrow", "week", "month")


def _may_hold_a_date(lower: str) -> bool:
    return "day" in lower or "week" in lower or "month" in lower or "tonight" in lower or "tomorrow" in lower  # _DATE_WORDS


def without_dates(text: str) -> bool:
    """True when `absolutize` would certainly leave `text` as it is (ASCII without a date word)."""
    return text.isascii() and not _may_hold_a_date(text.lower())


def absolutize(text: str, d: date) -> tuple[str, int]:
    """Relative dates in `text` made absolute as seen from day `d`; code spans are left alone.

    Returns the new text and how many expressions were replaced. "next Monday"
    is the first Monday after `d`; "last week" is the week (from Monday) before
    `d`'s; words already after a preposition get none added ("until tomorrow"
    → "until 2026-12-01", "We ship tomorrow" → "We ship on 2026-12-01").
    """
    if without_dates(text):
        return text, 0  # most memories: no regex pass at all
    return _absolutize_spans(text, d)


def _absolutize_spans(text: str, d: date) -> tuple[str, int]:
    """`absolutize` by the regexes, prose between code spans."""
    parts: list[str] = []
    total = 0
    pos = 0
    for m in _CODE.finditer(text):
        seg, n = _absolutize_prose(text[pos : m.start()], d)
        parts += [seg, m.group(0)]
        total += n
        pos = m.end()
    seg, n = _absolutize_prose(text[pos:], d)
    parts.append(seg)
    return "".join(parts), total + n
