"""Background work of knowledge bases: the ingestion of a document (K2), in shares on a Celery worker."""

from __future__ import annotations

from celery import shared_task

from core.conf import setting
from knowledge.ingest import CONTINUE, ingest_in_scope, ingest_share
from tenants.models import Tenant
from tenants.scope import tenant_scope


@shared_task(bind=True, name="knowledge.ingest_document")
def ingest_document(self, tenant_id: int, document_id: int, run: str = "") -> str:
    """Parse, chunk, embed and index one document of `tenant_id`; returns the outcome ("ready", "failed", ...).

    On a worker the work goes in shares of about KNOWLEDGE_INGEST_SLICE_SECONDS of embedding: a share keeps what it
    computed and queues the next one (`run` names the ingestion), which waits behind the tasks already queued, so
    one worker goes round every tenant's documents and a small upload never waits for another tenant's big one to
    finish. Called directly or eagerly (the embedded default's threads, tests), the whole document goes at once.

    Failures are written on the document's row, never raised: with eager tasks (tests, the embedded default) an
    exception would surface in the request that uploaded the file. Tasks are acknowledged late (settings), so a
    worker that dies mid-way leaves the task to be delivered again, and it goes on from the last share kept.
    """
    tenant = Tenant.objects.filter(pk=tenant_id).first()
    if tenant is None:
        return "gone"
    seconds = float(setting("KNOWLEDGE_INGEST_SLICE_SECONDS"))
    with tenant_scope(tenant):
        if self.request.called_directly or self.request.is_eager or seconds <= 0:
            return ingest_in_scope(document_id=document_id)
        outcome, run = ingest_share(document_id=document_id, run=run, seconds=seconds)
    if outcome == CONTINUE:
        ingest_document.delay(tenant_id, document_id, run)  # to the back of the queue: what waits goes first
    return outcome
