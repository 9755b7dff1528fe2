"""What of a long event the reply sees: the sentences around the ones that match the recall query.

An event's summary can be a whole message (the rules extraction keeps up to 500 characters), and a user–assistant
history is made of long messages: shown whole, a few of them fill the reply's budget. `excerpt` keeps the sentence
that shares the most query terms and grows around it by the better-matching neighbour while it stays within
`limit` characters, with "…" where it cut; a text that shares nothing with the query keeps its first sentences.
Sentences end at English . ! ? ; (before a space or the end: "3.5" is one word) and at Chinese 。！？；… (no space
needed), closing quotes and brackets kept with their sentence. Terms are the keyword retriever's (jieba words for
Chinese, folded English words), without stop and question words, so the cut follows what ranked the event.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from knowledge.keyword import STOP_WORDS, terms_for
from memory.longterm import store

_SENTENCE = re.compile(r".+?(?:[。！？；…]+[”’」』）)\"']*|[.!?;]+[\"'”’)]*(?=\s|$)|$)", re.DOTALL)
ELLIPSIS = "…"
_ASCII_WORD = re.compile(r"[0-9a-z]+(?:['’][a-z]+)?")
CJK_WIDTH = 3  # a Chinese character counts as this many letters of `limit` (about its share of tokens)
_CJK = re.compile(r"[\u3000-\u9fff\uf900-\ufaff\uff00-\uffef]")
_FUNCTION_CHARACTERS = frozenset("我你您他她它的了是在和有")  # single Chinese characters that say whom, not what
CJK_ENDS = frozenset("。！？；…”’」』）")  # a sentence ending in one is joined to the next without a space


@dataclass(frozen=True)
class _Sentence:
    text: str
    score: int


def sentences(text: str) -> list[str]:
    """`text` split into sentences (English and Chinese punctuation), stripped, none empty."""
    return [part for match in _SENTENCE.finditer(text) if (part := match.group(0).strip())]


def terms(text: str) -> frozenset[str]:
    """The content terms of `text` as the keyword retriever folds them (stop and question words left out)."""
    return frozenset(
        folded
        for term in terms_for(text)
        if (folded := store.fold(term)) not in STOP_WORDS
        and folded not in store.QUESTION_WORDS
        and (len(folded) > 1 or not folded.isascii())
        and folded not in _FUNCTION_CHARACTERS
    )


def query_terms(query: str) -> frozenset[str]:
    """The terms of a recall query that an excerpt looks for."""
    return terms(store.keyword_query(query or ""))


def excerpt(text: str, wanted: frozenset[str], *, limit: int) -> str:
    """`text` cut to at most about `limit` characters around its best-matching sentences (whole when it fits)."""
    if width(text) <= limit:
        return text
    parts = [_Sentence(part, _matches(part, wanted) if wanted else 0) for part in sentences(text)]
    if not parts:
        return text[:limit] + ELLIPSIS
    best = max(range(len(parts)), key=lambda i: (parts[i].score, -i)) if wanted else 0
    if parts[best].score == 0:
        best = 0
    start, end = best, best + 1
    size = width(parts[best].text)
    while True:
        side = _next_side(parts, start, end, size, limit)
        if side is None:
            break
        if side < start:
            start = side
        else:
            end = side + 1
        size += width(parts[side].text) + 1
    kept = _joined([part.text for part in parts[start:end]])
    if width(kept) > limit:  # one sentence longer than the limit: its part around the first matching term
        kept = _window(kept, wanted, limit)
    return (ELLIPSIS if start > 0 else "") + kept + (ELLIPSIS if end < len(parts) else "")


def _matches(sentence: str, wanted: frozenset[str]) -> int:
    """How many of the query's terms a sentence holds: English ones as folded words, Chinese ones as substrings
    (no segmenting per sentence: jieba over every sentence of twenty long events would cost the reply ~20 ms)."""
    lowered = unicodedata.normalize("NFKC", sentence).casefold()
    words = {store.fold(word) for word in _ASCII_WORD.findall(lowered)}
    return sum(1 for term in wanted if (term in words if term.isascii() else term in lowered))


def width(text: str) -> int:
    """`text`'s length with each Chinese character counted CJK_WIDTH times (what `limit` measures)."""
    return len(text) + (CJK_WIDTH - 1) * len(_CJK.findall(text))


def _joined(parts: list[str]) -> str:
    """Sentences put back together: a space after an English one, none after a Chinese one."""
    return "".join(part + ("" if part[-1] in CJK_ENDS else " ") for part in parts).rstrip()


def _next_side(parts: list[_Sentence], start: int, end: int, size: int, limit: int) -> int | None:
    """The neighbour to add next (the better-matching one, the following one on a tie), None when neither fits."""
    options = [i for i in (end, start - 1) if 0 <= i < len(parts) and size + width(parts[i].text) + 1 <= limit]
    if not options:
        return None
    return max(options, key=lambda i: (parts[i].score, i == end))


def _window(text: str, wanted: frozenset[str], limit: int) -> str:
    lowered = text.lower()
    hits = [found for term in wanted if (found := lowered.find(term)) >= 0]
    begin = max(0, min(hits) - limit // 4) if hits else 0
    room = limit * len(text) // max(width(text), 1)  # characters that fit `limit`
    begin = min(begin, max(0, len(text) - room))
    cut = text[begin : begin + room]
    return (ELLIPSIS if begin > 0 else "") + cut + (ELLIPSIS if begin + room < len(text) else "")
