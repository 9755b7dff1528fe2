"""Search over a knowledge base (K4, K5): vector, keyword (BM25) and hybrid. See docs/knowledge.md."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from knowledge.models import KnowledgeBase


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


def search(knowledge_base: KnowledgeBase, query: str, *, top_k: int = 5, mode: str = "hybrid") -> list[SearchHit]:
    """The best `top_k` chunks of `knowledge_base` for `query`; mode is "hybrid", "vector" or "keyword".
    Call inside the knowledge base's tenant scope."""
    raise NotImplementedError("knowledge.search is being written")
