"""Background work of knowledge bases: one ingestion task per document (K2)."""

from __future__ import annotations

from celery import shared_task

from knowledge.ingest import ingest_in_scope
from tenants.models import Tenant
from tenants.scope import tenant_scope


@shared_task(name="knowledge.ingest_document")
def ingest_document(tenant_id: int, document_id: int) -> str:
    """Parse, chunk, embed and index one document of `tenant_id`; returns the outcome ("ready", "failed", ...).

    Failures are written on the document's row, never raised: with eager tasks (tests, the embedded default) an
    exception would surface in the request that uploaded the file. Tasks are acknowledged late (settings), so a
    worker that dies mid-way leaves the task to be delivered again; the page also offers re-ingest on a stall.
    """
    tenant = Tenant.objects.filter(pk=tenant_id).first()
    if tenant is None:
        return "gone"
    with tenant_scope(tenant):
        return ingest_in_scope(document_id=document_id)
