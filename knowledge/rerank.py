"""Re-ranking: a second look at the hybrid's best candidates, behind one interface, within a latency budget.

No cross-encoder can be had offline from a registry package (none ships its weights), so the one re-ranker here
re-scores candidates with the local multilingual embedder (multilingual-e5-small): it helps a knowledge base whose
own embedder cannot read the query (the English model with a Chinese question: its vectors are skipped and BM25
alone ranks) or is another model. Candidates are scored best first until the budget is spent: a chunk already
embedded by the re-ranking model costs a dot product, another one is embedded now. The re-ranked head is then
fused again (z-scores of the hybrid's score and the new cosine); candidates the budget did not reach keep their
place after it. On a knowledge base that already uses the re-ranking model the hybrid holds the same evidence,
and the hits come back unchanged.

The head is fused as the hybrid fuses: BM25's scores and the re-ranker's cosines as z-scores, the re-ranker
standing in for the knowledge base's own vectors (it is the better reader where it is used at all).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from core.conf import setting
from knowledge.embedders import EmbedderError, embed_threads, local_embedder
from knowledge.models import Chunk, EmbedderKind, KnowledgeBase
from knowledge.ranking import Ranking, SearchHit, fuse_zscore, query_vector

logger = logging.getLogger(__name__)

DEPTH = 50  # candidates the re-ranker may look at


class Reranker(Protocol):
    name: str

    def scores(self, query: str, hits: Sequence[SearchHit], budget: float) -> dict[int, float]:
        """A score per chunk id for the hits (best first) it could score within `budget` seconds, counted once the
        query itself is read (loading the model and embedding the query are not the candidates' cost)."""
        ...


class EmbedderReranker:
    """Cosine similarity under the local multilingual model (stored vectors when the chunk has one of it)."""

    name = "embedder"

    def __init__(self) -> None:
        self.embedder = local_embedder("local_multilingual")

    def scores(self, query: str, hits: Sequence[SearchHit], budget: float) -> dict[int, float]:
        vector = np.asarray(query_vector(self.embedder, query), dtype=np.float32)
        deadline = time.monotonic() + budget
        stored = dict(
            Chunk.objects.filter(
                pk__in=[hit.chunk_id for hit in hits], embedding_model=self.embedder.model
            ).values_list("pk", "embedding")
        )
        out: dict[int, float] = {}
        missing: list[SearchHit] = []
        for hit in hits:
            if stored.get(hit.chunk_id) is not None:
                out[hit.chunk_id] = float(np.asarray(stored[hit.chunk_id], dtype=np.float32) @ vector)
            else:
                missing.append(hit)
        # The others best first, as many at a time as the model runs side by side, until the budget is spent.
        step = embed_threads()
        for start in range(0, len(missing), step):
            if time.monotonic() >= deadline:
                break
            batch = missing[start : start + step]
            for hit, row in zip(batch, self.embedder.embed([hit.text for hit in batch]), strict=True):
                out[hit.chunk_id] = float(row @ vector)
        return out


def rerank(
    query: str, hits: list[SearchHit], *, top_k: int, reranker: Reranker | None = None, budget_ms: float | None = None
) -> list[SearchHit]:
    """The hybrid's `hits` (best first) re-ranked: the head the re-ranker scored within the budget is fused again
    with its scores; the rest follow in their order. On a failing model the hits are returned as they were."""
    if len(hits) < 2:
        return hits[:top_k]
    budget = setting("KNOWLEDGE_RERANK_BUDGET_MS") if budget_ms is None else budget_ms
    reranker = reranker or default_reranker()
    try:
        scored = reranker.scores(query, hits[:DEPTH], budget / 1000)
    except EmbedderError:
        logger.warning("re-ranking failed; the hybrid order is kept", exc_info=True)
        return hits[:top_k]
    head = [hit for hit in hits if hit.chunk_id in scored]
    if len(head) < 2:
        return hits[:top_k]
    # The re-ranker stands in for the knowledge base's own vectors over the head: fused with BM25 as the hybrid
    # fuses them (z-scores against a top of CANDIDATES, the rest of the collection at the floor).
    by_keyword = sorted(head, key=lambda hit: -hit.scores.get("keyword", 0.0))
    by_rerank = sorted(head, key=lambda hit: -scored[hit.chunk_id])
    fused = fuse_zscore(
        [
            Ranking(
                "keyword", 1.0, [h.chunk_id for h in by_keyword], [h.scores.get("keyword", 0.0) for h in by_keyword]
            ),
            Ranking(
                reranker.name,
                1.0,
                [h.chunk_id for h in by_rerank],
                [scored[h.chunk_id] for h in by_rerank],
                floor=scored[by_rerank[-1].chunk_id],
            ),
        ]
    )
    order = sorted(head, key=lambda hit: -fused[hit.chunk_id])
    for hit in order:
        hit.scores["rerank"] = scored[hit.chunk_id]
    rest = [hit for hit in hits if hit.chunk_id not in scored]
    return (order + rest)[:top_k]


def default_reranker() -> Reranker:
    return EmbedderReranker()


def needs_rerank(knowledge_bases: Sequence[KnowledgeBase]) -> bool:
    """Whether re-ranking can add anything: some knowledge base is not on the re-ranking model."""
    return any(kb.embedder != EmbedderKind.LOCAL_MULTILINGUAL for kb in knowledge_bases)
