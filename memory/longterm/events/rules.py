"""Extraction without a model (offline): one event per message, entities by part-of-speech (jieba) and capitalised
names. Rules cannot see causes, contradictions or resolutions: those need the model."""

from __future__ import annotations

import re
from typing import Any

from memory.longterm import store
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


def rule_event(*, actor: str, text: str) -> dict[str, Any]:
    """One event for one message, without a model."""
    summary = re.sub(r"\s+", " ", text).strip()[:500]
    action = "query" if _QUESTION.search(summary.lower()) else ("report" if actor == EventActor.USER else "answer")
    return {
        "event_id": "n1",
        "actor": actor,
        "action_type": action,
        "content_summary": summary,
        "entities": rule_entities(summary),
        "status": EventStatus.COMPLETED,
    }
