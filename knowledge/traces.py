"""What a knowledge-base retrieval's span says (core.tracing; docs/observability.md): which knowledge bases, how
it searched, how many hits; the query only with TRACES_CAPTURE_CONTENT."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core import tracing


def retrieval_attributes(knowledge_bases: Sequence[Any], query: str, **kwargs: Any) -> dict[str, Any]:
    ids = [knowledge_base.pk for knowledge_base in knowledge_bases]
    return {
        "gen_ai.operation.name": "retrieval",
        "gen_ai.data_source.id": ",".join(str(pk) for pk in ids),
        "agentplat.knowledge_base.ids": ids,
        "agentplat.retrieval.mode": kwargs.get("mode", "hybrid"),
        "agentplat.retrieval.top_k": kwargs.get("top_k", 5),
        "agentplat.retrieval.rerank": bool(kwargs.get("rerank", False)),
        "gen_ai.retrieval.query.text": tracing.text(query),
    }


def retrieval_hits(hits: Sequence[Any]) -> dict[str, Any]:
    return {
        "agentplat.retrieval.hits": len(hits),
        "agentplat.retrieval.hit_knowledge_base_ids": sorted({hit.knowledge_base_id for hit in hits}),
    }
