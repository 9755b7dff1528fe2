"""Background work of knowledge bases: the ingestion of documents (K2), in shares on a Celery worker."""

from __future__ import annotations

from collections.abc import Sequence

from celery import shared_task

from core.conf import setting
from knowledge import vectorstore
from knowledge.ingest import CONTINUE, TAKEN, ingest_next_share, ingest_queued_in_scope, queued_is_taken
from tenants.models import Tenant
from tenants.scope import tenant_scope


@shared_task(bind=True, name="knowledge.ingest_document")
def ingest_document(self, tenant_id: int, document_id: int, run: str = "", documents: Sequence[int] = ()) -> str:
    """Parse, chunk, embed and index one queued document of `tenant_id`, with the small documents queued after it in
    its knowledge base (their own tasks then find them taken: "taken"); returns the outcome ("ready", "failed", ...).

    On a worker the work goes in shares of about KNOWLEDGE_INGEST_SLICE_SECONDS of embedding: a share keeps what it
    computed and queues the next one (`run` names the ingestion, `documents` its documents), which waits behind the
    tasks already queued, so one worker goes round every tenant's documents and a small upload never waits for
    another tenant's big one to finish. Called directly or eagerly (the embedded default's threads, tests), the whole
    batch goes at once.

    Failures are written on the documents' rows, never raised: with eager tasks (tests, the embedded default) an
    exception would surface in the request that uploaded the file. Tasks are acknowledged late (settings), so a
    worker that dies mid-way leaves the task to be delivered again, and it goes on from the last share kept.
    """
    seconds = float(setting("KNOWLEDGE_INGEST_SLICE_SECONDS"))
    whole = self.request.called_directly or self.request.is_eager or seconds <= 0
    if whole:
        return ingest_queued(tenant_id, document_id)[0]
    if not run and queued_is_taken(tenant_id=tenant_id, document_id=document_id, on_worker=True):
        return TAKEN
    tenant = Tenant.objects.filter(pk=tenant_id).first()
    if tenant is None:
        return "gone"
    with tenant_scope(tenant):
        result = ingest_next_share(document_id=document_id, run=run, seconds=seconds, documents=documents)
    if result.outcome == CONTINUE:  # to the back of the queue: what waits goes first
        ingest_document.delay(tenant_id, result.document_id, result.run, list(result.documents))
    return result.outcome


def ingest_queued(tenant_id: int, document_id: int) -> tuple[str, list[int]]:
    """A queued document's whole ingestion in this process (the task called directly or eagerly, the embedded
    default's threads): its outcome, and the ids of the queued documents it took along."""
    if queued_is_taken(tenant_id=tenant_id, document_id=document_id, on_worker=False):
        return TAKEN, []
    tenant = Tenant.objects.filter(pk=tenant_id).first()
    if tenant is None:
        return "gone", []
    taken: list[int] = []
    with tenant_scope(tenant):
        outcome = ingest_queued_in_scope(document_id=document_id, taken=taken)
    return outcome, taken


@shared_task(name="knowledge.drop_vector_indexes")
def drop_vector_indexes(knowledge_base_id: int) -> list[str]:
    """Drop a deleted knowledge base's own HNSW indexes (queued once its deletion commits); their names."""
    return vectorstore.drop_own_indexes(knowledge_base_id)
