"""The time an event speaks of, not only when it was said: relative time expressions ("yesterday", "last year",
"the week before", "last Friday", 上周, 去年, 昨天 ...) and dates ("in May", "8 May 2023", "in 2022", 2023年5月)
resolved against the moment of speaking.

A resolved expression is a `Period` (first and last day, inclusive). Events keep theirs as entities of type DATE
named by `Period.label` ("2023-05-07", "2023-05-01..2023-05-07", "2023-05", "2023"), so events that speak of the
same time are linked across sessions like any shared entity, and `Period.parse` reads a label back. A question
that names a time raises the events whose period (or, without one, the day they were said) overlaps it
(memory.longterm.events.walk).
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass

DATE_TYPE = "DATE"


@dataclass(frozen=True, order=True)
class Period:
    """Days `start` to `end`, both included."""

    start: dt.date
    end: dt.date

    @property
    def label(self) -> str:
        first_of_month = self.start.day == 1
        if self.start == self.end:
            return self.start.isoformat()
        if first_of_month and self.start.month == 1 and self.end == dt.date(self.start.year, 12, 31):
            return f"{self.start.year:04d}"
        if first_of_month and self.end == _month(self.start.year, self.start.month).end:
            return f"{self.start.year:04d}-{self.start.month:02d}"
        return f"{self.start.isoformat()}..{self.end.isoformat()}"

    @classmethod
    def parse(cls, label: str) -> Period | None:
        """The period a label names (None when it names none)."""
        try:
            if ".." in label:
                first, last = label.split("..", 1)
                return cls(dt.date.fromisoformat(first), dt.date.fromisoformat(last))
            if re.fullmatch(r"\d{4}", label):
                return cls(dt.date(int(label), 1, 1), dt.date(int(label), 12, 31))
            if re.fullmatch(r"\d{4}-\d{2}", label):
                return _month(int(label[:4]), int(label[5:]))
            day = dt.date.fromisoformat(label)
        except ValueError:
            return None
        return cls(day, day)

    def overlaps(self, other: Period) -> bool:
        return self.start <= other.end and other.start <= self.end


def _day(day: dt.date) -> Period:
    return Period(day, day)


def _month(year: int, month: int) -> Period:
    while month < 1:
        year, month = year - 1, month + 12
    while month > 12:
        year, month = year + 1, month - 12
    return Period(dt.date(year, month, 1), dt.date(year, month, calendar.monthrange(year, month)[1]))


def _week(day: dt.date, shift: int = 0) -> Period:
    monday = day - dt.timedelta(days=day.weekday()) + dt.timedelta(weeks=shift)
    return Period(monday, monday + dt.timedelta(days=6))


def _year(year: int) -> Period:
    return Period(dt.date(year, 1, 1), dt.date(year, 12, 31))


def _weekend(day: dt.date, shift: int) -> Period:
    saturday = _week(day, shift).start + dt.timedelta(days=5)
    return Period(saturday, saturday + dt.timedelta(days=1))


def _weekday(day: dt.date, weekday: int, shift: int | None) -> Period:
    """`weekday` (0 Monday) of the week `shift` weeks from `day`'s; None: the latest one before `day`."""
    if shift is None:
        back = (day.weekday() - weekday) % 7 or 7
        return _day(day - dt.timedelta(days=back))
    return _day(_week(day, shift).start + dt.timedelta(days=weekday))


def _ago(day: dt.date, count: int, unit: str) -> Period:
    if unit.startswith("day"):
        return _day(day - dt.timedelta(days=count))
    if unit.startswith("week"):
        return _week(day - dt.timedelta(weeks=count))
    if unit.startswith("month"):
        return _month(day.year, day.month - count)
    return _year(day.year - count)


_MONTHS = {name.lower(): number for number, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): number for number, name in enumerate(calendar.month_abbr) if name})
_MONTHS.pop("may", None)
_MONTHS["may"] = 5
_WEEKDAYS = {name.lower(): number for number, name in enumerate(calendar.day_name)}
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "a couple of": 2}
_SHIFT = {"last": -1, "past": -1, "previous": -1, "this": 0, "next": 1, "coming": 1}
_ZH_DIGITS = {"一": 1, "两": 2, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10}
_ZH_SHIFT = {"上": -1, "这": 0, "本": 0, "今": 0, "下": 1}
_ZH_WEEKDAY = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}
_MONTH_WORD = "|".join(sorted(_MONTHS, key=len, reverse=True))
_WEEKDAY_WORD = "|".join(_WEEKDAYS)
_COUNT_WORD = r"\d+|a couple of|an|a|one|two|three|four|five|six"

Rule = tuple[re.Pattern, Callable[[re.Match, dt.date], Period | None]]


def _count(text: str) -> int:
    return int(text) if text.isdigit() else _NUMBERS.get(text.lower(), 1)


def _zh_count(text: str) -> int:
    """1-99 written in digits or Chinese numerals (十二, 二十, 两)."""
    if text.isdigit():
        return int(text)
    tens, _, ones = text.rpartition("十")
    if "十" not in text:
        return _ZH_DIGITS.get(text, 1)
    return _ZH_DIGITS.get(tens, 1) * 10 + _ZH_DIGITS.get(ones, 0)


def _month_of(name: str, day: dt.date, year: str | None) -> Period:
    """A month named without a year is the latest one not after `day`."""
    month = _MONTHS[name.lower()]
    if year:
        return _month(int(year), month)
    return _month(day.year if month <= day.month else day.year - 1, month)


def _dated(year: int, month: int, number: int) -> Period | None:
    try:
        return _day(dt.date(year, month, number))
    except ValueError:
        return None


def _unit_period(unit: str, day: dt.date, shift: int) -> Period:
    if unit == "week":
        return _week(day, shift)
    if unit == "weekend":
        return _weekend(day, shift)
    if unit == "month":
        return _month(day.year, day.month + shift)
    return _year(day.year + shift)


_I = re.IGNORECASE
RULES: list[Rule] = [
    # Dates first: "8 May 2023", "May 8, 2023", "May 2023", "in May", "in 2022"; "2023年5月8日", "2023年5月".
    (re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)? ({_MONTH_WORD}),? (\d{{4}})\b", _I),
     lambda m, d: _dated(int(m[3]), _MONTHS[m[2].lower()], int(m[1]))),
    (re.compile(rf"\b({_MONTH_WORD}) (\d{{1,2}})(?:st|nd|rd|th)?,? (\d{{4}})\b", _I),
     lambda m, d: _dated(int(m[3]), _MONTHS[m[1].lower()], int(m[2]))),
    (re.compile(rf"\b({_MONTH_WORD}),? (\d{{4}})\b", _I), lambda m, d: _month_of(m[1], d, m[2])),
    (re.compile(rf"\b(?:in|during|since|last|this|early|late|mid|of) ({_MONTH_WORD})\b", _I),
     lambda m, d: _month_of(m[1], d, None)),
    (re.compile(r"\b(?:in|during|since|of|back in|around) ((?:19|20)\d\d)\b", _I), lambda m, d: _year(int(m[1]))),
    (re.compile(r"(\d{4})年(\d{1,2})月(\d{1,2})[日号]"), lambda m, d: _dated(int(m[1]), int(m[2]), int(m[3]))),
    (re.compile(r"(\d{4})年(\d{1,2})月"), lambda m, d: _month(int(m[1]), int(m[2]))),
    (re.compile(r"(\d{4})年"), lambda m, d: _year(int(m[1]))),
    # Relative to the day of speaking.
    (re.compile(r"\b(?:the )?day before yesterday\b", _I), lambda m, d: _day(d - dt.timedelta(days=2))),
    (re.compile(r"\b(?:yesterday|last night)\b", _I), lambda m, d: _day(d - dt.timedelta(days=1))),
    (re.compile(r"\b(?:today|tonight|this (?:morning|afternoon|evening))\b", _I), lambda m, d: _day(d)),
    (re.compile(r"\btomorrow\b", _I), lambda m, d: _day(d + dt.timedelta(days=1))),
    (re.compile(rf"\b({_COUNT_WORD}) (day|week|month|year)s? ago\b", _I),
     lambda m, d: _ago(d, _count(m[1]), m[2].lower())),
    (re.compile(r"\b(?:a few|few|several) days ago\b", _I), lambda m, d: Period(d - dt.timedelta(days=6), d)),
    (re.compile(r"\bthe (week|weekend|month|year) before\b", _I), lambda m, d: _unit_period(m[1].lower(), d, -1)),
    (re.compile(rf"\b(last|past|previous|this|next|coming) ({_WEEKDAY_WORD})\b", _I),
     lambda m, d: _weekday(d, _WEEKDAYS[m[2].lower()], _SHIFT[m[1].lower()] if m[1].lower() != "last" else None)),
    (re.compile(r"\b(last|past|previous|this|next|coming) (week|weekend|month|year)\b", _I),
     lambda m, d: _unit_period(m[2].lower(), d, _SHIFT[m[1].lower()])),
    (re.compile(rf"\b(?:on )?({_WEEKDAY_WORD})\b", _I), lambda m, d: _weekday(d, _WEEKDAYS[m[1].lower()], None)),
    # Chinese.
    (re.compile(r"大前天"), lambda m, d: _day(d - dt.timedelta(days=3))),
    (re.compile(r"前天"), lambda m, d: _day(d - dt.timedelta(days=2))),
    (re.compile(r"昨天|昨晚|昨日"), lambda m, d: _day(d - dt.timedelta(days=1))),
    (re.compile(r"今天|今晚|今日"), lambda m, d: _day(d)),
    (re.compile(r"明天|明晚"), lambda m, d: _day(d + dt.timedelta(days=1))),
    (re.compile(r"后天"), lambda m, d: _day(d + dt.timedelta(days=2))),
    (re.compile(r"([\d一两二三四五六七八九十]+)(天|周|个?星期|个?月|年)[以之]?前"), lambda m, d: _zh_ago(m, d)),
    (re.compile(r"([上这本下])(?:个)?(?:周|星期|礼拜)([一二三四五六日天])"),
     lambda m, d: _weekday(d, _ZH_WEEKDAY[m[2]], _ZH_SHIFT[m[1]])),
    (re.compile(r"([上这本下])(?:个)?(?:周末)"), lambda m, d: _weekend(d, _ZH_SHIFT[m[1]])),
    (re.compile(r"([上这本下])(?:个)?(?:周|星期|礼拜)"), lambda m, d: _week(d, _ZH_SHIFT[m[1]])),
    (re.compile(r"([上这本下])个?月"), lambda m, d: _month(d.year, d.month + _ZH_SHIFT[m[1]])),
    (re.compile(r"前年"), lambda m, d: _year(d.year - 2)),
    (re.compile(r"去年"), lambda m, d: _year(d.year - 1)),
    (re.compile(r"今年"), lambda m, d: _year(d.year)),
    (re.compile(r"明年"), lambda m, d: _year(d.year + 1)),
    (re.compile(r"(?:周|星期|礼拜)([一二三四五六日天])"), lambda m, d: _weekday(d, _ZH_WEEKDAY[m[1]], None)),
    (re.compile(r"(\d{1,2}|[一二三四五六七八九十]{1,2})月份?"), lambda m, d: _zh_month(m, d)),
]  # fmt: skip


def _zh_ago(match: re.Match, day: dt.date) -> Period:
    unit = {"天": "day", "周": "week", "年": "year"}.get(match[2][-1], "month" if "月" in match[2] else "week")
    return _ago(day, _zh_count(match[1]), unit)


def _zh_month(match: re.Match, day: dt.date) -> Period | None:
    month = _zh_count(match[1])
    if not 1 <= month <= 12:
        return None
    return _month(day.year if month <= day.month else day.year - 1, month)


def resolve(text: str, said: dt.date | dt.datetime) -> list[Period]:
    """The periods `text` speaks of, resolved against the day it was said (each stretch of text read once: the
    first rule that matches it wins)."""
    day = said.date() if isinstance(said, dt.datetime) else said
    taken: list[tuple[int, int]] = []
    found: dict[Period, int] = {}
    for pattern, build in RULES:
        for match in pattern.finditer(text or ""):
            if any(match.start() < end and start < match.end() for start, end in taken):
                continue
            taken.append(match.span())
            try:
                period = build(match, day)
            except (ValueError, OverflowError):  # no such day: "0000年", "9999年前", "100000 days ago"
                period = None
            if period is not None:
                found.setdefault(period, match.start())
    return sorted(found, key=found.__getitem__)


def date_entities(text: str, said: dt.date | dt.datetime) -> list[dict[str, str]]:
    """The periods of `text` as entities of type DATE (what an event stores)."""
    return [{"name": period.label, "type": DATE_TYPE} for period in resolve(text, said)]
