"""Keyword search (K5): terms for BM25 (jieba word segmentation for Chinese, words for English) and a BM25 index.

Two layers, so that a better normaliser never needs a re-ingest:
- `terms_for(text)` is what ingestion stores in `Chunk.terms`: lower-cased English words and jieba's
  search-mode segmentation of Chinese runs (a long word and its shorter words, so "人工智能" also yields
  "人工" and "智能").
- `index_terms(terms)` is applied by the BM25 index to the stored terms and to the query alike: stop words
  dropped, English plurals folded (a minimal S-stemmer, as Lucene's EnglishMinimalStemmer), letters split from
  digits ("gpt4" -> "gpt" "4", as "GPT-4" and "GPT 4" give; "cvpr2022" -> "cvpr" "2022").
Text is NFKC-normalised first, so full-width letters and digits ("ＧＰＴ－４") read as their ASCII forms, and Chinese
is folded from traditional to simplified characters (OpenCC's t2s: "颱風" -> "台风") before jieba, whose dictionary
is simplified: a traditional query finds simplified text and the other way round. (Chunks stored before the folding
keep their terms until they are ingested again.)
"""

from __future__ import annotations

import copy
import logging
import math
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

_WORD = re.compile(r"[0-9a-z]+(?:['’][a-z]+)?|[\u3400-\u9fff\uf900-\ufaff]+", re.IGNORECASE)
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_LATIN = re.compile(r"[a-z]", re.IGNORECASE)
_jieba_lock = threading.Lock()
_jieba = None
_opencc = None

# Lucene's English stop set (EnglishAnalyzer) and the commonest Chinese function words. BM25's idf already
# discounts frequent terms; dropping these keeps them from adding noise to short queries and long chunks alike.
_ENGLISH_STOP = (
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these "
    "they this to was will with"
)
_CHINESE_STOP = (
    "的 了 是 在 和 与 及 或 也 就 都 而 之 其 这 那 个 着 把 被 对 于 由 从 为 以 吗 呢 吧 啊 么 什么 哪 哪个 哪些 "
    "谁 怎么 怎样 如何 多少 几 是否 什么样"
)
ENGLISH_STOP_WORDS = frozenset(_ENGLISH_STOP.split())
CHINESE_STOP_WORDS = frozenset(_CHINESE_STOP.split())
STOP_WORDS = ENGLISH_STOP_WORDS | CHINESE_STOP_WORDS


def _segmenter():
    global _jieba
    if _jieba is None:
        with _jieba_lock:
            if _jieba is None:
                import jieba  # noqa: PLC0415 - ~0.4 s to import, and its dictionary loads here: only on the first Chinese text

                jieba.setLogLevel(logging.WARNING)
                jieba.initialize()
                _jieba = jieba
    return _jieba


def _simplified(text: str) -> str:
    """Traditional Chinese characters and phrases as simplified ones (OpenCC t2s; simplified text is unchanged)."""
    global _opencc
    if _opencc is None:
        with _jieba_lock:
            if _opencc is None:
                import opencc  # noqa: PLC0415 - loaded with its conversion tables on the first Chinese text only

                _opencc = opencc.OpenCC("t2s")
    return _opencc.convert(text)


def has_cjk(text: str) -> bool:
    return bool(_CJK.search(text))


def latin_share(text: str) -> float:
    """The share of Latin letters among the letters of `text` (Latin and CJK): 1.0 for English, 0.0 for Chinese.
    A text with neither counts as Latin."""
    latin = len(_LATIN.findall(text))
    cjk = len(_CJK.findall(text))
    return 1.0 if latin + cjk == 0 else latin / (latin + cjk)


def terms_for(text: str) -> list[str]:
    """The terms of `text` as stored for BM25, in order (repeats kept)."""
    terms: list[str] = []
    text = unicodedata.normalize("NFKC", text)
    if has_cjk(text):
        text = _simplified(text)
    for match in _WORD.finditer(text):
        word = match.group(0).lower()
        if has_cjk(word):
            terms.extend(t for t in _segmenter().cut_for_search(word) if t.strip())
        else:
            terms.append(word)
    return terms


def stem(word: str) -> str:
    """A minimal English S-stemmer (Harman 1991): plural forms to the singular, nothing more aggressive."""
    if len(word) < 4 or not word.isascii() or not word.isalpha():
        return word
    if word.endswith("ies") and not word.endswith(("eies", "aies")):
        return word[:-3] + "y"
    if word.endswith("es") and not word.endswith(("aes", "ees", "oes")):
        return word[:-1]
    if word.endswith("s") and not word.endswith(("us", "ss")):
        return word[:-1]
    return word


_LETTERS_OR_DIGITS = re.compile(r"[a-z]+|[0-9]+")


def index_terms(terms: Iterable[str]) -> list[str]:
    """Stored (or query) terms as the BM25 index counts them: stop words out, English plurals folded, letters split
    from digits."""
    out = []
    for term in terms:
        if term in STOP_WORDS:
            continue
        if term.endswith(("'s", "’s")):
            term = term[:-2]
        if term.isascii() and term.isalnum() and not (term.isalpha() or term.isdigit()):
            out.extend(stem(part) for part in _LETTERS_OR_DIGITS.findall(term) if part not in STOP_WORDS)
        else:
            out.append(stem(term))
    return out


@dataclass(frozen=True)
class KeywordHits:
    """The best chunks for a query: chunk ids and their BM25 scores, best first."""

    ids: np.ndarray
    scores: np.ndarray


@dataclass(frozen=True)
class CollectionStats:
    """What BM25's idf and length normalisation need, over one index or several searched as one collection."""

    count: int
    average_length: float
    frequencies: dict[str, int]

    @classmethod
    def of(cls, indexes: Sequence[BM25Index], query: str) -> CollectionStats:
        count = sum(len(index) for index in indexes)
        total = sum(index.total_length for index in indexes)
        terms = set(index_terms(terms_for(query)))
        frequencies = {term: sum(index.document_frequency(term) for index in indexes) for term in terms}
        return cls(count=count, average_length=total / count if count else 1.0, frequencies=frequencies)

    def idf(self, term: str) -> float:
        df = self.frequencies.get(term, 0)
        return math.log(1.0 + (self.count - df + 0.5) / (df + 0.5))


class BM25Index:
    """Okapi BM25 over a fixed set of chunks (k1=0.9, b=0.4, the Anserini defaults used for BEIR's BM25 figures),
    with Lucene's always-positive idf. Immutable; kept in memory.

    A knowledge base's keyword index is a few of these *segments* (as Lucene does it): chunks added since the
    last build form a new small segment, chunks deleted are masked out of theirs (`without`), and several
    segments are searched as one collection through `CollectionStats`, so a change costs what changed, not a
    rebuild of the whole knowledge base (see knowledge.retrieval.keyword_segments)."""

    def __init__(self, ids: Sequence[int], stored_terms: Sequence[str], *, k1: float = 0.9, b: float = 0.4) -> None:
        self.k1 = k1
        self.b = b
        self.ids = np.asarray(ids, dtype=np.int64)
        postings: dict[str, tuple[list[int], list[int]]] = {}
        lengths = np.zeros(len(self.ids), dtype=np.float32)
        normalised: dict[str, str | None] = {}  # stored term -> index term (None: a stop word), once per word
        for row, text in enumerate(stored_terms):
            counts: Counter[str] = Counter()
            for word in text.split():
                term = normalised.get(word, "")
                if term == "":
                    found = index_terms([word])
                    term = normalised[word] = found[0] if found else None
                if term is not None:
                    counts[term] += 1
            lengths[row] = sum(counts.values())
            for term, tf in counts.items():
                entry = postings.get(term)
                if entry is None:
                    entry = postings[term] = ([], [])
                entry[0].append(row)
                entry[1].append(tf)
        self.lengths = lengths
        self._postings: dict[str, tuple[np.ndarray, np.ndarray]] = {
            term: (np.asarray(rows, dtype=np.int32), np.asarray(tfs, dtype=np.float32))
            for term, (rows, tfs) in postings.items()
        }
        self.live: np.ndarray | None = None  # rows still in the collection (None: all of them)
        self.live_count = len(self.ids)
        self.total_length = float(lengths.sum())
        self._norm_cache: tuple[float, np.ndarray] | None = None

    def without(self, chunk_ids: Iterable[int]) -> BM25Index:
        """This segment with `chunk_ids` masked out (a new object; this one is unchanged, so searches running
        on it meanwhile are not disturbed). Ids not in the segment are ignored."""
        gone = np.isin(self.ids, np.fromiter(chunk_ids, dtype=np.int64))
        if self.live is not None:
            gone &= self.live  # already masked: nothing new
        if not gone.any():
            return self
        segment = copy.copy(self)
        segment.live = (np.ones(len(self.ids), dtype=bool) if self.live is None else self.live.copy()) & ~gone
        segment.live_count = int(segment.live.sum())
        segment.total_length = float(self.lengths[segment.live].sum())
        return segment

    def live_ids(self) -> np.ndarray:
        return self.ids if self.live is None else self.ids[self.live]

    def __len__(self) -> int:
        return self.live_count

    def document_frequency(self, term: str) -> int:
        posting = self._postings.get(term)
        if posting is None:
            return 0
        return len(posting[0]) if self.live is None else int(np.count_nonzero(self.live[posting[0]]))

    def _norm(self, average_length: float) -> np.ndarray:
        cached = self._norm_cache
        if cached is None or cached[0] != average_length:
            norm = self.k1 * (1.0 - self.b + self.b * self.lengths / max(average_length, 1e-9))
            cached = self._norm_cache = (average_length, norm.astype(np.float32))
        return cached[1]

    def scores(self, query: str, stats: CollectionStats | None = None) -> np.ndarray:
        """The BM25 score of every chunk (index order) for `query`; 0 for masked-out chunks. `stats`: the
        collection the idf and average length come from when several indexes are searched as one (default:
        this index alone)."""
        stats = stats or CollectionStats.of([self], query)
        norm = self._norm(stats.average_length)
        scores = np.zeros(len(self.ids), dtype=np.float32)
        for term, query_tf in Counter(index_terms(terms_for(query))).items():
            posting = self._postings.get(term)
            if posting is None:
                continue
            rows, tfs = posting
            scores[rows] += query_tf * stats.idf(term) * tfs * (self.k1 + 1.0) / (tfs + norm[rows])
        if self.live is not None:
            scores[~self.live] = 0.0
        return scores

    def search(self, query: str, k: int, stats: CollectionStats | None = None) -> KeywordHits:
        """The `k` best chunks that contain at least one query term."""
        scores = self.scores(query, stats)
        hit_rows = np.flatnonzero(scores > 0)
        if len(hit_rows) > k:
            hit_rows = hit_rows[np.argpartition(-scores[hit_rows], k - 1)[:k]]
        hit_rows = hit_rows[np.argsort(-scores[hit_rows], kind="stable")]
        return KeywordHits(ids=self.ids[hit_rows], scores=scores[hit_rows])
