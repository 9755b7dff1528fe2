"""Extraction without a model (offline): one event per message, entities by part-of-speech (jieba) and capitalised
names. Rules cannot see causes, contradictions or resolutions: those need the model."""

from __future__ import annotations

import re
from typing import Any

from memory.longterm import store
from memory.longterm.events import excerpts
from memory.models import EventActor, EventStatus

_PROPER = {"nr": "PERSON", "ns": "PLACE", "nt": "ORG", "nz": "OTHER", "nrt": "PERSON", "nrfg": "PERSON"}
_LATIN_NAME = re.compile(r"\b[A-Z][a-zA-Z]+(?:\s+[A-Z][a-zA-Z]+)*\b")
_QUESTION = re.compile(
    r"[?？]\s*$|^(what|why|how|when|where|who|which|do|does|did|is|are|can|could)\b|吗|为什么|什么|怎么|如何|哪"
)
_COMMON_CAPITALISED = {
    "I", "The", "A", "An", "It", "This", "That", "What", "Why", "How", "When", "Where", "Who", "Which", "Yes", "No",
    "Hi", "Hey", "Hello", "Thanks", "Thank", "Oh", "Wow", "Well", "So", "And", "But", "Do", "Did", "Are", "Is",
    "Can", "My", "We", "You", "Your", "Our", "They", "He", "She", "That's", "It's", "I'm", "Sure", "Great",
}  # fmt: skip


def rule_entities(text: str) -> list[dict[str, str]]:
    """Names in `text`: jieba's proper nouns, a letter glued to a noun (A港口, 客户C), capitalised English words."""
    import jieba.posseg  # noqa: PLC0415 - posseg loads its tables on import (~0.8 s): only the rules way needs them

    found: dict[str, str] = {}
    words = list(jieba.posseg.cut(text)) if store.normalise(text) and re.search(r"[\u4e00-\u9fff]", text) else []
    for number, pair in enumerate(words):
        word, flag = pair.word, pair.flag
        if flag in _PROPER and len(word) > 1:
            found.setdefault(word, _PROPER[flag])
        if flag in ("eng", "x") and re.fullmatch(r"[A-Za-z0-9]{1,4}", word):
            before = words[number - 1] if number else None
            after = words[number + 1] if number + 1 < len(words) else None
            if after is not None and after.flag.startswith("n"):
                found.setdefault(word + after.word, "OTHER")
            elif before is not None and before.flag.startswith("n"):
                found.setdefault(before.word + word, "OTHER")
    for match in _LATIN_NAME.finditer(text):
        name = match.group(0)
        parts = [part for part in name.split() if part not in _COMMON_CAPITALISED]
        if parts:
            found.setdefault(" ".join(parts), "OTHER")
    return [{"name": name, "type": kind} for name, kind in list(found.items())[:12]]


# A long message can be kept as several events, its statements, so that a fact in the middle of a long answer is
# found by itself (one event keeps at most SUMMARY_CHARS of a message). With SPLIT_AT > 0, a message at most SPLIT_AT
# wide (characters, a Chinese one counted as excerpts.CJK_WIDTH) stays one event and a wider one is cut at sentence
# ends (Chinese and Latin punctuation, line breaks) into statements at most STATEMENT_CHARS wide (a wider sentence is
# a statement alone, cut at SUMMARY_CHARS characters). Off (0) by default: on the long user–assistant set's dev half
# (bench/ualong_build.py, English) SPLIT_AT 500 / STATEMENT_CHARS 400 lost recall@10 0.979 -> 0.972 and multi-hop
# all@10 0.800 -> 0.600, with three times the events and twice the recall time; MemoryBank unchanged (docs/memory.md).
SUMMARY_CHARS = 500
SPLIT_AT = 0
STATEMENT_CHARS = 400


def statements(text: str) -> list[str]:
    """`text` as the statements its events keep: one (whitespace folded, cut at SUMMARY_CHARS) when splitting is off
    (SPLIT_AT 0) or it is at most SPLIT_AT wide (excerpts.width: a Chinese character counts as CJK_WIDTH letters),
    else its sentences (excerpts.sentences: English and Chinese punctuation; each line apart) packed in order into
    pieces at most STATEMENT_CHARS wide."""
    folded = re.sub(r"\s+", " ", text).strip()
    if SPLIT_AT <= 0 or excerpts.width(folded) <= SPLIT_AT:
        return [folded[:SUMMARY_CHARS]] if folded else []
    pieces: list[str] = []
    for line in text.splitlines():
        for sentence in excerpts.sentences(re.sub(r"\s+", " ", line)):
            glue = "" if pieces and pieces[-1][-1] in excerpts.CJK_ENDS else " "
            if pieces and excerpts.width(pieces[-1] + glue + sentence) <= STATEMENT_CHARS:
                pieces[-1] += glue + sentence
            else:
                pieces.append(sentence[:SUMMARY_CHARS])
    return pieces


def _action(actor: str, text: str, *, may_ask: bool = True) -> str:
    if may_ask and _QUESTION.search(text.lower()):
        return "query"
    return "report" if actor == EventActor.USER else "answer"


def _event(number: int, actor: str, summary: str, action: str) -> dict[str, Any]:
    return {
        "event_id": f"n{number}",
        "actor": actor,
        "action_type": action,
        "content_summary": summary,
        "entities": rule_entities(summary),
        "status": EventStatus.COMPLETED,
    }


# What a message that only acknowledges, thanks, greets or laughs is made of (English words; Chinese phrases, the
# longest taken away first). Such a message is no event (the model's extraction prompt skips small talk too): it
# holds nothing to find, and its event would take a place among a user's facts. "Yes" and "no" are not here: an
# answer to a question is a fact in its context.
CHATTER_WORDS = frozenset({
    "ok", "okay", "k", "kk", "sure", "thanks", "thank", "you", "thx", "ty", "much", "so", "a", "lot", "great",
    "cool", "nice", "awesome", "got", "it", "understood", "alright", "all", "right", "hi", "hello", "hey", "bye",
    "goodbye", "good", "night", "morning", "evening", "lol", "haha", "hahaha", "hehe", "wow", "perfect", "sounds",
    "welcome", "you're", "np", "see", "ya", "later", "will", "do", "oh", "ah", "cheers"
})  # fmt: skip
CHATTER_PHRASES = sorted([
    "好的", "好滴", "好嘞", "嗯嗯", "嗯", "哦哦", "哦", "噢", "谢谢", "多谢", "感谢", "谢啦",
    "不客气", "没问题", "没事", "收到", "明白", "了解", "知道了", "哈哈哈", "哈哈", "呵呵", "嘿嘿",
    "再见", "拜拜", "晚安", "早安", "早上好", "晚上好", "你好", "您好", "太好了", "好吧", "好",
    "棒", "辛苦了", "啊", "呀", "啦", "了", "哈", "你", "您", "的"
], key=len, reverse=True)  # fmt: skip
CHATTER_CHARS = 40  # wider messages (excerpts.width) are never chatter
_CHATTER_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")


def is_chatter(text: str) -> bool:
    """Whether `text` only acknowledges, thanks, greets or laughs (CHATTER_WORDS, CHATTER_PHRASES), at most
    CHATTER_CHARS wide; punctuation, emoji and numbers aside."""
    folded = store.normalise(text).replace("’", "'")
    if not folded or excerpts.width(folded) > CHATTER_CHARS:
        return False
    rest = _CHATTER_WORD.sub(lambda word: "" if word.group(0) in CHATTER_WORDS else word.group(0), folded)
    for phrase in CHATTER_PHRASES:
        rest = rest.replace(phrase, "")
    return not re.search(r"[^\W\d_]", rest)


def rule_events(*, actor: str, text: str) -> list[dict[str, Any]]:
    """The events of one message, without a model: one per statement (`statements`), ids n1, n2, ... in order; none
    for chatter (`is_chatter`). A question is what the message as a whole asks: only its last statement can be a
    `query` (what follows it is read as its answer)."""
    if is_chatter(text):
        return []
    parts = statements(text)
    return [
        _event(number, actor, summary, _action(actor, summary, may_ask=number == len(parts)))
        for number, summary in enumerate(parts, start=1)
    ]


def rule_event(*, actor: str, text: str) -> dict[str, Any]:
    """One event for one message, without a model (its first SUMMARY_CHARS characters)."""
    summary = re.sub(r"\s+", " ", text).strip()[:SUMMARY_CHARS]
    return _event(1, actor, summary, _action(actor, summary))
