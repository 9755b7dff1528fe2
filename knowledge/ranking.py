"""What a retriever answers and how answers are fused (docs/knowledge-retrieval.md): a Ranking per retriever, the
fusions (z-scores by default, min-max and reciprocal rank for comparison), the hits, the language weight of the
vector retriever and the cached query vectors. knowledge.retrieval searches with them, knowledge.rerank fuses its
second look with them and memory.longterm.store ranks its own collections with them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.cache import LRUCache
from knowledge.embedders import Embedder
from knowledge.keyword import latin_share

# How many candidates each retriever contributes (and over how many its scores are standardised).
CANDIDATES = 100
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
