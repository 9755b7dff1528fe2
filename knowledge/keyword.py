"""Keyword terms for BM25 (K5): jieba word segmentation for Chinese, lower-cased words for English."""

from __future__ import annotations

import re
import threading

_WORD = re.compile(r"[0-9a-z]+(?:['’][a-z]+)?|[\u3400-\u9fff\uf900-\ufaff]+", re.IGNORECASE)
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_jieba_lock = threading.Lock()
_jieba = None


def _segmenter():
    global _jieba
    if _jieba is None:
        with _jieba_lock:
            if _jieba is None:
                import logging

                import jieba

                jieba.setLogLevel(logging.WARNING)
                jieba.initialize()
                _jieba = jieba
    return _jieba


def has_cjk(text: str) -> bool:
    return bool(_CJK.search(text))


def terms_for(text: str) -> list[str]:
    """The terms of `text` as BM25 sees them, in order (repeats kept)."""
    terms: list[str] = []
    for match in _WORD.finditer(text):
        word = match.group(0).lower()
        if has_cjk(word):
            terms.extend(t for t in _segmenter().cut_for_search(word) if t.strip())
        else:
            terms.append(word)
    return terms
