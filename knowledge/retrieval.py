"""Search over knowledge bases (K4, K5): vector, keyword (BM25) and hybrid. See docs/knowledge-retrieval.md.

Hybrid search fuses the retrievers' candidate lists by a weighted sum of z-scores (CombSUM over standardised
scores): each retriever's scores are standardised over its own top candidates, so cosine similarities and BM25
scores become comparable and a chunk that stands far above a retriever's other candidates counts for more than
one that is merely ranked first; a score below the retriever's average counts as no evidence rather than evidence
against, and a retriever whose best candidate stands out more is trusted more for that query. Each retriever's
weight also says whether it can read the query at all (the
English-only local model gets the query's share of Latin letters, so a Chinese query is ranked by BM25 alone
and the model cannot drag it down). Reciprocal rank fusion and min-max fusion are kept for comparison
(bench/kb_retrieval.py --fusions zscore,zscore_signed,rrf,rrf_plain,minmax).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from django.db import connections, router

from core import tracing
from core.cache import LRUCache
from knowledge import rerank as second_look
from knowledge import traces, vectorstore
from knowledge.embedders import Embedder, EmbedderError, embedder_for
from knowledge.keyword import BM25Index, CollectionStats
from knowledge.models import Chunk, KnowledgeBase
from knowledge.ranking import (
    CANDIDATES,
    DEFAULT_FUSION,
    FUSIONS,
    Ranking,
    SearchHit,
    clear_query_vectors,
    query_vector,
    vector_weight,
)

logger = logging.getLogger(__name__)

MODES = ("hybrid", "vector", "keyword")
# The vector retriever's own list in a hybrid search is shorter (standardised over CANDIDATES all the same, the
# rest at its lowest score): an HNSW scan for 100 neighbours of the multilingual model's tightly packed vectors took
# ~40 ms at 100,000 chunks against ~13 ms for 10, and on the dev split (cmrc2018 trial) 50 ranks within 0.001 of
# 100 (docs/knowledge-retrieval.md).
VECTOR_CANDIDATES = 50

# --- the retrievers ----------------------------------------------------------------------------------------------

_keyword_states = LRUCache(32)
_keyword_locks: dict[tuple, threading.Lock] = {}
_keyword_locks_guard = threading.Lock()
# Segments above this many are merged (all but the largest become one); a segment with more than this share of
# its chunks deleted is rebuilt from its live chunks.
MAX_SEGMENTS = 8
MAX_DELETED_SHARE = 0.5
FETCH_BATCH = 5000


@dataclass(frozen=True)
class KeywordState:
    """A knowledge base's keyword index in this process: its segments and what they hold."""

    revision: int
    segments: tuple[BM25Index, ...]
    ids: np.ndarray  # the live chunk ids, sorted


def _database_key() -> tuple[str, str]:
    alias = router.db_for_read(Chunk)
    return alias, str(connections[alias].settings_dict.get("NAME"))


def keyword_segments(knowledge_base: KnowledgeBase) -> tuple[BM25Index, ...]:
    """The BM25 segments of a knowledge base at its revision, kept per process. The first use builds one
    segment of every chunk; after a change only the difference is read: the chunk ids (one narrow query), the
    terms of the new chunks (a new segment), and deleted chunks are masked out of their segments. Searched
    together (`CollectionStats` over all segments), the segments rank exactly as one index of the same chunks
    would (tested)."""
    key = (*_database_key(), knowledge_base.pk)
    state = _keyword_states.get(key)
    if state is not None and state.revision == knowledge_base.revision:
        return state.segments
    with _keyword_locks_guard:
        lock = _keyword_locks.setdefault(key, threading.Lock())
    with lock:  # one refresh per knowledge base at a time; the others then find it done
        state = _keyword_states.get(key)
        if state is None or state.revision != knowledge_base.revision:
            state = _keyword_states.put(key, _refreshed(knowledge_base, state))
    return state.segments


def _chunk_terms(knowledge_base_id: int, **filters: Any) -> tuple[list[int], list[str]]:
    rows = Chunk.objects.filter(knowledge_base_id=knowledge_base_id, **filters).order_by("id")
    ids, terms = [], []
    for chunk_id, chunk_terms in rows.values_list("id", "terms").iterator(chunk_size=FETCH_BATCH):
        ids.append(chunk_id)
        terms.append(chunk_terms or "")
    return ids, terms


def _segment_of(knowledge_base_id: int, chunk_ids: np.ndarray) -> BM25Index:
    ids: list[int] = []
    terms: list[str] = []
    for start in range(0, len(chunk_ids), FETCH_BATCH):
        part_ids, part_terms = _chunk_terms(knowledge_base_id, id__in=chunk_ids[start : start + FETCH_BATCH].tolist())
        ids += part_ids
        terms += part_terms
    return BM25Index(ids, terms)


def _refreshed(knowledge_base: KnowledgeBase, state: KeywordState | None) -> KeywordState:
    if state is None:
        segment = BM25Index(*_chunk_terms(knowledge_base.pk))
        return KeywordState(knowledge_base.revision, (segment,), np.sort(segment.ids))
    current = np.fromiter(
        Chunk.objects.filter(knowledge_base_id=knowledge_base.pk).order_by("id").values_list("id", flat=True),
        dtype=np.int64,
    )
    removed = np.setdiff1d(state.ids, current, assume_unique=True)
    added = np.setdiff1d(current, state.ids, assume_unique=True)
    segments = [segment.without(removed.tolist()) if len(removed) else segment for segment in state.segments]
    segments = [segment for segment in segments if len(segment)]
    if len(added):
        segments.append(_segment_of(knowledge_base.pk, added))
    return KeywordState(knowledge_base.revision, tuple(_merged(knowledge_base.pk, segments)), current)


def _merged(knowledge_base_id: int, segments: list[BM25Index]) -> list[BM25Index]:
    """Rebuild segments that are mostly deleted; when there are too many, merge all but the largest."""
    segments = [
        _segment_of(knowledge_base_id, segment.live_ids())
        if len(segment) < (1.0 - MAX_DELETED_SHARE) * len(segment.ids)
        else segment
        for segment in segments
    ]
    if len(segments) <= MAX_SEGMENTS:
        return segments
    largest = max(segments, key=len)
    rest = np.sort(np.concatenate([segment.live_ids() for segment in segments if segment is not largest]))
    return [largest, _segment_of(knowledge_base_id, rest)]


def clear_caches() -> None:
    """Drop every per-process search structure (tests)."""
    _keyword_states.clear()
    clear_query_vectors()
    vectorstore.clear_caches()


def _current(knowledge_bases: Sequence[KnowledgeBase]) -> list[KnowledgeBase]:
    """The given knowledge bases as the active tenant scope sees them now (fresh revision; others' dropped)."""
    wanted = [kb.pk for kb in knowledge_bases]
    found = {kb.pk: kb for kb in KnowledgeBase.objects.filter(pk__in=wanted)}
    return [found[pk] for pk in dict.fromkeys(wanted) if pk in found]


def _keyword_ranking(knowledge_bases: Sequence[KnowledgeBase], query: str, depth: int) -> tuple[Ranking, Callable]:
    indexes = [segment for kb in knowledge_bases for segment in keyword_segments(kb)]
    # Several knowledge bases are one collection for BM25: idf and average length over all of them.
    stats = CollectionStats.of(indexes, query)
    all_scores = [index.scores(query, stats) for index in indexes]
    merged: list[tuple[float, int]] = []
    for index, scores in zip(indexes, all_scores, strict=True):
        rows = np.flatnonzero(scores > 0)
        if len(rows) > depth:
            rows = rows[np.argpartition(-scores[rows], depth - 1)[:depth]]
        merged.extend(zip(scores[rows].tolist(), index.ids[rows].tolist(), strict=True))
    merged.sort(key=lambda pair: -pair[0])
    merged = merged[:depth]
    ranking = Ranking("keyword", 1.0, [chunk_id for _, chunk_id in merged], [score for score, _ in merged])

    def fill(chunk_ids: Sequence[int]) -> None:
        missing = list(set(chunk_ids) - set(ranking.ids))
        for index, scores in zip(indexes, all_scores, strict=True) if missing else ():
            rows = np.flatnonzero(np.isin(index.ids, missing))
            ranking.extra.update(zip(index.ids[rows].tolist(), scores[rows].tolist(), strict=True))

    return ranking, fill


def _vector_rankings(
    knowledge_bases: Sequence[KnowledgeBase], query: str, depth: int, *, strict: bool, skip_unreadable: bool = True
) -> list[tuple[Ranking, Callable]]:
    """One ranking per embedder in use (knowledge bases may use different ones, whose scores do not mix)."""
    groups: dict[tuple, tuple[Embedder, list[KnowledgeBase]]] = {}
    for kb in knowledge_bases:
        try:
            embedder = embedder_for(kb)
        except EmbedderError:
            if strict:
                raise
            logger.warning("knowledge base %s: no embedder, keyword search only", kb.pk, exc_info=True)
            continue
        key = (embedder.kind, getattr(getattr(embedder, "provider", None), "pk", None), embedder.model)
        groups.setdefault(key, (embedder, []))[1].append(kb)
    backend = vectorstore.backend()
    out = []
    for embedder, kbs in groups.values():
        weight = vector_weight(embedder, query)
        if weight <= 0 and not strict and skip_unreadable:
            continue  # hybrid: a model that cannot read the query would only add noise (and its latency)
        try:
            vector = query_vector(embedder, query)
        except EmbedderError:
            if strict:
                raise
            logger.warning("query embedding failed (%s), keyword search only", embedder.model, exc_info=True)
            continue
        merged: list[tuple[float, int]] = []
        for kb in kbs:
            for chunk_id, score in backend.search(kb, model=embedder.model, vector=vector, k=depth):
                merged.append((score, chunk_id))
        merged.sort(key=lambda pair: -pair[0])
        merged = merged[:depth]
        ranking = Ranking(
            "vector",
            weight,
            [chunk_id for _, chunk_id in merged],
            [score for score, _ in merged],
            floor=merged[-1][0] if merged else 0.0,
        )

        def fill(chunk_ids: Sequence[int], ranking=ranking, kbs=kbs, vector=vector, model=embedder.model) -> None:
            missing = list(set(chunk_ids) - set(ranking.ids))
            for kb in kbs if missing else []:
                ranking.extra.update(backend.similarities(kb, model=model, vector=vector, chunk_ids=missing))

        out.append((ranking, fill))
    return out


def _hits(fused: dict[int, float], rankings: Sequence[Ranking], top_k: int) -> list[SearchHit]:
    best = sorted(fused, key=lambda chunk_id: -fused[chunk_id])[:top_k]
    rows = {
        row["id"]: row
        for row in Chunk.objects.filter(id__in=best).values(
            "id",
            "document_id",
            "document__name",
            "position",
            "text",
            "metadata",
            "knowledge_base_id",
            "knowledge_base__name",
        )
    }
    hits = []
    for chunk_id in best:
        row = rows.get(chunk_id)
        if row is None:  # deleted since the index was built
            continue
        scores: dict[str, float] = {}
        for ranking in rankings:
            scores[ranking.name] = float(ranking.score_of(chunk_id))
            if chunk_id in ranking.ids:
                scores[f"{ranking.name}_rank"] = ranking.ids.index(chunk_id) + 1
        hits.append(
            SearchHit(
                chunk_id=chunk_id,
                document_id=row["document_id"],
                document_name=row["document__name"],
                position=row["position"],
                text=row["text"],
                score=float(fused[chunk_id]),
                scores=scores,
                metadata=row["metadata"] or {},
                knowledge_base_id=row["knowledge_base_id"],
                knowledge_base_name=row["knowledge_base__name"],
            )
        )
    return hits


@tracing.traced("retrieval", before=traces.retrieval_attributes, after=traces.retrieval_hits)
def search_many(
    knowledge_bases: Sequence[KnowledgeBase],
    query: str,
    *,
    top_k: int = 5,
    mode: str = "hybrid",
    fusion: str = DEFAULT_FUSION,
    rerank: bool = False,
) -> list[SearchHit]:
    """The best `top_k` chunks of several knowledge bases for `query`, as if they were one collection (an agent's
    knowledge bases). Knowledge bases outside the active tenant scope are ignored. Call inside a tenant scope.
    `rerank` (hybrid only) gives the best candidates a second look (knowledge.rerank) within a latency budget."""
    if mode not in MODES:
        raise ValueError(f"Unknown search mode {mode!r}: use one of {', '.join(MODES)}.")
    query = (query or "").strip()
    if not query or top_k <= 0:
        return []
    knowledge_bases = _current(knowledge_bases)
    if not knowledge_bases:
        return []
    if rerank and mode == "hybrid":
        hits = search_many(knowledge_bases, query, top_k=max(top_k, second_look.DEPTH), fusion=fusion)
        if second_look.needs_rerank(knowledge_bases):
            return second_look.rerank(query, hits, top_k=top_k)
        return hits[:top_k]
    # Fusion needs each retriever's wider candidate list (and its score distribution); one retriever, top_k.
    depth = max(CANDIDATES, top_k) if mode == "hybrid" else top_k
    parts: list[tuple[Ranking, Callable]] = []
    if mode in ("hybrid", "keyword"):
        parts.append(_keyword_ranking(knowledge_bases, query, depth))
    if mode in ("hybrid", "vector"):
        # Plain RRF ignores the weights: it is kept to show what they prevent, so it gets every ranking.
        vector_depth = depth if mode == "vector" else max(VECTOR_CANDIDATES, top_k)
        parts.extend(
            _vector_rankings(
                knowledge_bases, query, vector_depth, strict=mode == "vector", skip_unreadable=fusion != "rrf_plain"
            )
        )
    rankings = [ranking for ranking, _ in parts]
    if len(rankings) == 1:
        ranking = rankings[0]
        fused = dict(zip(ranking.ids, ranking.scores, strict=True))
    else:
        candidates = list(dict.fromkeys(chunk_id for ranking in rankings for chunk_id in ranking.ids))
        for _, fill in parts:
            fill(candidates)
        fused = FUSIONS[fusion](rankings)
    return _hits(fused, rankings, top_k)


def search(
    knowledge_base: KnowledgeBase,
    query: str,
    *,
    top_k: int = 5,
    mode: str = "hybrid",
    fusion: str = DEFAULT_FUSION,
    rerank: bool = False,
) -> list[SearchHit]:
    """The best `top_k` chunks of `knowledge_base` for `query`; mode is "hybrid", "vector" or "keyword".
    Call inside the knowledge base's tenant scope (another tenant's knowledge base gives no hits)."""
    return search_many([knowledge_base], query, top_k=top_k, mode=mode, fusion=fusion, rerank=rerank)


# --- ranking a collection held in memory (long-term memory's events, memories and turns) -------------------------


@dataclass(frozen=True)
class Collection:
    """A small collection searched the knowledge bases' way, held by the caller: keyword segments (searched as one
    collection) and a vector matrix whose rows are `vector_ids` (rows without a vector are keyword-only)."""

    segments: tuple[BM25Index, ...]
    vector_ids: np.ndarray
    matrix: np.ndarray  # float32, len(vector_ids) x dimension, rows L2-normalised
    # When the rows come from several embedders (long-term memory's MEMORY_EMBEDDER=auto): where each one's rows
    # end in `matrix`, in the caller's order of embedders; empty: all rows are the first embedder's.
    group_ends: tuple[int, ...] = ()
    # The ids of rows the caller marks, ascending (long-term memory: the assistant's events); searching ignores them.
    marked: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def size(self) -> int:
        return sum(len(segment) for segment in self.segments)
