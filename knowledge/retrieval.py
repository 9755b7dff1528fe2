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
from typing import TYPE_CHECKING, Any

import numpy as np
from django.db import connections, router

from core.cache import LRUCache
from knowledge import vectorstore
from knowledge.embedders import Embedder, EmbedderError, embedder_for
from knowledge.keyword import BM25Index, CollectionStats, latin_share

if TYPE_CHECKING:
    from knowledge.models import KnowledgeBase

logger = logging.getLogger(__name__)

MODES = ("hybrid", "vector", "keyword")
# How many candidates each retriever contributes (and over how many its scores are standardised).
CANDIDATES = 100
# The vector retriever's own list in a hybrid search is shorter (standardised over CANDIDATES all the same, the
# rest at its lowest score): an HNSW scan for 100 neighbours of the multilingual model's tightly packed vectors took
# ~40 ms at 100,000 chunks against ~13 ms for 10, and on the dev split (cmrc2018 trial) 50 ranks within 0.001 of
# 100 (docs/knowledge-retrieval.md).
VECTOR_CANDIDATES = 50
RRF_K = 60


@dataclass
class SearchHit:
    chunk_id: int
    document_id: int
    document_name: str
    position: int
    text: str
    score: float
    scores: dict[str, float] = field(default_factory=dict)  # per retriever: "vector", "keyword" (and ranks)
    metadata: dict[str, Any] = field(default_factory=dict)
    knowledge_base_id: int = 0
    knowledge_base_name: str = ""


@dataclass
class Ranking:
    """One retriever's answer: candidates best first, and its score for any chunk it can score."""

    name: str  # "keyword" or "vector"
    weight: float
    ids: list[int]
    scores: list[float]
    # The retriever's score for chunks outside its own list (filled for the other retrievers' candidates).
    extra: dict[int, float] = field(default_factory=dict)
    # The score of a chunk the retriever does not match at all (BM25: 0; vectors: its lowest candidate).
    floor: float = 0.0

    def score_of(self, chunk_id: int) -> float:
        for candidate, score in zip(self.ids, self.scores, strict=True):
            if candidate == chunk_id:
                return score
        return self.extra.get(chunk_id, self.floor)


# --- fusion ------------------------------------------------------------------------------------------------------


def fuse_zscore(
    rankings: Sequence[Ranking], depth: int = CANDIDATES, *, signed: bool = False, by_confidence: bool = True
) -> dict[int, float]:
    """Weighted CombSUM of z-scores: each retriever's score minus the mean of its top `depth` candidates, over
    their standard deviation, times its weight. Scale-free, so cosine similarities and BM25 scores mix.

    Two refinements, each measured on the dev sets (docs/knowledge-retrieval.md, "Two refinements"):
    - below its own average a retriever has no evidence, not evidence against: a z-score under 0 counts as 0, so
      a chunk the model found is not pushed down because it shares no word with the query (`signed` keeps the
      negative part);
    - `by_confidence`: each retriever's weight is scaled by how far its best candidate stands above the others (its
      top z-score), relative to the other retrievers': one that found something specific counts for more than one
      whose list is flat."""
    fused: dict[int, float] = {}
    candidates = {chunk_id for ranking in rankings for chunk_id in ranking.ids}
    standardised: list[tuple[Ranking, float, float]] = []
    for ranking in rankings:
        if ranking.weight <= 0 or not ranking.ids:
            continue
        top = np.asarray(ranking.scores[:depth], dtype=np.float64)
        if len(top) < depth:  # a BM25 list shorter than depth: the rest of the corpus scores the floor
            top = np.concatenate([top, np.full(depth - len(top), ranking.floor)])
        mean, spread = float(top.mean()), float(top.std())
        if spread > 1e-9:
            standardised.append((ranking, mean, spread))
    confidence = [max((ranking.scores[0] - mean) / spread, 1e-6) for ranking, mean, spread in standardised]
    average = sum(confidence) / len(confidence) if confidence else 1.0
    for (ranking, mean, spread), sure in zip(standardised, confidence, strict=True):
        weight = ranking.weight * (sure / average if by_confidence else 1.0)
        own = dict(zip(ranking.ids, ranking.scores, strict=True))
        for chunk_id in candidates:
            z = (own.get(chunk_id, ranking.extra.get(chunk_id, ranking.floor)) - mean) / spread
            fused[chunk_id] = fused.get(chunk_id, 0.0) + weight * (z if signed else max(z, 0.0))
    if not standardised:  # every retriever flat: keep the first list's order
        for ranking in rankings:
            for rank, chunk_id in enumerate(ranking.ids):
                fused.setdefault(chunk_id, -float(rank))
    return fused


def fuse_minmax(rankings: Sequence[Ranking], depth: int = CANDIDATES) -> dict[int, float]:
    """Weighted convex combination of min-max normalised scores (each retriever's top `depth` mapped to 0..1)."""
    fused: dict[int, float] = {}
    candidates = {chunk_id for ranking in rankings for chunk_id in ranking.ids}
    for ranking in rankings:
        if ranking.weight <= 0 or not ranking.ids:
            continue
        top = ranking.scores[:depth]
        low = min(top) if len(top) >= depth else min(min(top), ranking.floor)
        high = max(top)
        if high - low <= 1e-9:
            continue
        own = dict(zip(ranking.ids, ranking.scores, strict=True))
        for chunk_id in candidates:
            score = own.get(chunk_id, ranking.extra.get(chunk_id, ranking.floor))
            fused[chunk_id] = fused.get(chunk_id, 0.0) + ranking.weight * max(0.0, score - low) / (high - low)
    return fused


def fuse_rrf(rankings: Sequence[Ranking], k: int = RRF_K) -> dict[int, float]:
    """Reciprocal rank fusion, weighted: sum of weight / (k + rank)."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        if ranking.weight <= 0:
            continue
        for rank, chunk_id in enumerate(ranking.ids, start=1):
            fused[chunk_id] = fused.get(chunk_id, 0.0) + ranking.weight / (k + rank)
    return fused


FUSIONS: dict[str, Callable[[Sequence[Ranking]], dict[int, float]]] = {
    "zscore": fuse_zscore,
    # The z-score fusion before its two refinements (negative evidence kept, fixed weights), for comparison.
    "zscore_signed": lambda rankings: fuse_zscore(rankings, signed=True, by_confidence=False),
    "minmax": fuse_minmax,
    "rrf": fuse_rrf,
    "rrf_plain": lambda rankings: fuse_rrf([Ranking(r.name, 1.0, r.ids, r.scores) for r in rankings]),
}
DEFAULT_FUSION = "zscore"


def vector_weight(embedder: Embedder, query: str) -> float:
    """How far the embedder can read the query: the English-only model reads only its Latin part."""
    return latin_share(query) if embedder.english_only else 1.0


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
    from knowledge.models import Chunk

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
    from knowledge.models import Chunk

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
    from knowledge.models import Chunk

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


_query_vectors = LRUCache(256)


def query_vector(embedder: Embedder, query: str) -> np.ndarray:
    """The embedding of a query (the last few hundred are kept: a page re-run, several knowledge bases)."""
    key = (embedder.kind, getattr(getattr(embedder, "provider", None), "pk", None), embedder.model, query)
    vector = _query_vectors.get(key)
    if vector is None:
        vector = _query_vectors.put(key, embedder.embed([query], query=True)[0])
    return vector


def clear_query_vectors() -> None:
    """Forget the query embeddings (the bench times each query from scratch)."""
    _query_vectors.clear()


def clear_caches() -> None:
    """Drop every per-process search structure (tests)."""
    _keyword_states.clear()
    _query_vectors.clear()
    vectorstore.clear_caches()


def _current(knowledge_bases: Sequence[KnowledgeBase]) -> list[KnowledgeBase]:
    """The given knowledge bases as the active tenant scope sees them now (fresh revision; others' dropped)."""
    from knowledge.models import KnowledgeBase

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
    from knowledge.models import Chunk

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
        from knowledge import rerank as second_look

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

    @property
    def size(self) -> int:
        return sum(len(segment) for segment in self.segments)


def rank_collection(
    collection: Collection,
    query: str,
    *,
    embedder: Embedder | None,
    top_k: int,
    query_vec: np.ndarray | None = None,
    allowed: Callable[[np.ndarray], np.ndarray] | None = None,
    fusion: str = DEFAULT_FUSION,
) -> list[tuple[int, float]]:
    """The best `top_k` (id, fused score) of `collection` for `query`: BM25 and cosine candidates fused as
    search_many fuses them (same weights by language, same z-score fusion). `allowed(ids) -> bool mask` keeps
    only some rows (turns still in the window, superseded events...)."""
    query = (query or "").strip()
    if not query or top_k <= 0 or collection.size == 0:
        return []
    depth = max(CANDIDATES, top_k)
    stats = CollectionStats.of(collection.segments, query)
    keyword: list[tuple[float, int]] = []
    all_scores = []
    for segment in collection.segments:
        scores = segment.scores(query, stats)
        mask = scores > 0
        if allowed is not None and len(segment.ids):
            mask &= allowed(segment.ids)
        rows = np.flatnonzero(mask)
        if len(rows) > depth:
            rows = rows[np.argpartition(-scores[rows], depth - 1)[:depth]]
        keyword.extend(zip(scores[rows].tolist(), segment.ids[rows].tolist(), strict=True))
        all_scores.append(scores)
    keyword.sort(key=lambda pair: -pair[0])
    rankings = [Ranking("keyword", 1.0, [i for _, i in keyword[:depth]], [s for s, _ in keyword[:depth]])]
    vector_scores = None
    weight = vector_weight(embedder, query) if embedder is not None else 0.0
    if weight > 0 and len(collection.vector_ids):
        if query_vec is None:
            try:
                query_vec = query_vector(embedder, query)
            except EmbedderError:
                logger.warning("query embedding failed, keyword ranking only", exc_info=True)
        if query_vec is not None:
            vector_scores = collection.matrix @ np.asarray(query_vec, dtype=np.float32)
            rows = np.arange(len(collection.vector_ids))
            if allowed is not None:
                rows = np.flatnonzero(allowed(collection.vector_ids))
            if len(rows) > depth:
                rows = rows[np.argpartition(-vector_scores[rows], depth - 1)[:depth]]
            rows = rows[np.argsort(-vector_scores[rows], kind="stable")]
            ids = collection.vector_ids[rows].tolist()
            scores = vector_scores[rows].tolist()
            rankings.append(Ranking("vector", weight, ids, scores, floor=scores[-1] if scores else 0.0))
    rankings = [ranking for ranking in rankings if ranking.ids]
    if not rankings:
        return []
    if len(rankings) == 1:
        fused = dict(zip(rankings[0].ids, rankings[0].scores, strict=True))
    else:
        keyword_ranking, vector_ranking = rankings
        candidates = set(keyword_ranking.ids) | set(vector_ranking.ids)
        for segment, scores in zip(collection.segments, all_scores, strict=True):
            rows = np.flatnonzero(np.isin(segment.ids, list(candidates - set(keyword_ranking.ids))))
            keyword_ranking.extra.update(zip(segment.ids[rows].tolist(), scores[rows].tolist(), strict=True))
        rows = np.flatnonzero(np.isin(collection.vector_ids, list(candidates - set(vector_ranking.ids))))
        vector_ranking.extra.update(
            zip(collection.vector_ids[rows].tolist(), vector_scores[rows].tolist(), strict=True)  # type: ignore[index]
        )
        fused = FUSIONS[fusion](rankings)
    best = sorted(fused, key=lambda item_id: -fused[item_id])[:top_k]
    return [(int(item_id), float(fused[item_id])) for item_id in best]
