"""The knowledge bases' hybrid over a collection the bench holds in memory (memory_recall.py's `hybrid` baseline
over the turns): BM25 and cosine candidates fused as knowledge.retrieval.search_many fuses them. Imported once
Django is set up (common.setup_django)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from knowledge.embedders import Embedder, EmbedderError
from knowledge.keyword import CollectionStats
from knowledge.ranking import CANDIDATES, DEFAULT_FUSION, FUSIONS, Ranking, query_vector, vector_weight
from knowledge.retrieval import Collection

logger = logging.getLogger(__name__)


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
