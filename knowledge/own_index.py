"""The build of a large knowledge base's own vector index: a Celery task of its own, queued by ingestion's store stage
(knowledge.ingest.store) once the knowledge base holds KNOWLEDGE_OWN_INDEX_MIN_CHUNKS chunks, as the build takes from
seconds to minutes and a worker's ingestion shares are kept short.

It sits below ingestion (it needs only the vector store and the tenant scope), so ingestion imports it like any other
module; knowledge.tasks, which queues ingestion, stays above both.
"""

from __future__ import annotations

from celery import shared_task

from knowledge import vectorstore
from tenants.taskscope import tenant_task


@shared_task(name="knowledge.build_vector_index")
@tenant_task(gone=False)
def build_vector_index(tenant_id: int, knowledge_base_id: int, dimension: int) -> bool:
    """Build a large knowledge base's own HNSW index (queued by ingestion once it crosses
    KNOWLEDGE_OWN_INDEX_MIN_CHUNKS); True when this task built it. A no-op when it exists or is being built."""
    return vectorstore.ensure_own_index(knowledge_base_id, dimension)
