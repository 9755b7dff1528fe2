"""Ingestion of documents (K2): parse -> chunk -> embed in batches -> write chunks -> index.

`document_ingest(document_id=...)` runs every stage synchronously inside the document's tenant scope; the benchmark
and the demo data call it. A queued document (the task, `ingest_queued_in_scope` and `ingest_share`) takes the small
documents queued after it in its knowledge base along (`claim_batch`: up to BATCH_DOCUMENTS of at most
SMALL_DOCUMENT_BYTES, BATCH_BYTES in all): they are parsed one by one, their chunks embedded in shared batches and
written with one bulk insert, their rows marked in one statement and the knowledge base's revision bumped once, so a
thousand short uploads cost what their embeddings cost, not a thousand rounds of bookkeeping. Their own tasks find
them taken and return at once (TAKEN). On a Celery worker, `ingest_share` does the work in shares of about
KNOWLEDGE_INGEST_SLICE_SECONDS of embedding, each a task that keeps what it computed (`IngestShare` rows) and queues
the next one behind whatever else waits: one worker goes round the documents of every tenant, so a tenant's big
document (or a batch of small ones) never holds back another tenant's small one. Progress is written as it goes (one
UPDATE of the stage, progress and updated_at columns of the batch's documents, only when the whole percentage
changes):

    parse 0-10 %, chunk 10-20 %, embed 20-90 % (batch by batch), index 90-100 %.

The new chunks replace the old ones in one transaction at the end, so search keeps answering from the old chunks
while a document is re-ingested. Each document keeps its own outcome: one that fails (parse, limits, its texts'
embeddings) is marked failed with a message for its row (the traceback goes to the log only) and leaves the batch,
its previous chunks, if any, staying searchable; one deleted, replaced or queued again meanwhile leaves the batch
unstored; the others go on.

This module holds the entry points; the work is in its parts, each using only those listed below it:

    pipeline  the batch: read, cut, embed (whole, or a share until a deadline), then store
    store     the new chunks in one transaction, the documents ready, the vector indexes
    shares    what a run keeps between its shares on a worker
    progress  what the page shows: stage and percentage, and a failed document's reason
    claim     which documents a batch takes, and whether they are still its own
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence

from django.utils import timezone

from knowledge.ingest.claim import TAKEN, claim_batch, kept_run, queued_is_taken, stalled_after
from knowledge.ingest.pipeline import CONTINUE, DUPLICATE, EMBED_BATCH, Batch, ShareResult, restart
from knowledge.ingest.progress import IngestError
from knowledge.models import Document, DocumentStatus
from tenants.models import Tenant
from tenants.scope import all_tenants, tenant_scope

__all__ = [
    "CONTINUE",
    "DUPLICATE",
    "EMBED_BATCH",
    "TAKEN",
    "IngestError",
    "ShareResult",
    "document_ingest",
    "ingest_in_scope",
    "ingest_next_share",
    "ingest_queued_in_scope",
    "ingest_share",
    "queued_is_taken",
]

logger = logging.getLogger(__name__)


def document_ingest(*, document_id: int) -> str:
    """Ingest a document of any tenant (its scope is entered here); returns the outcome: "ready", "failed",
    "gone" (deleted meanwhile) or "superseded" (its file was replaced meanwhile; the newer ingestion wins)."""
    with all_tenants(reason="knowledge ingestion: find the tenant of the document to ingest"):
        tenant_id = Document.objects.filter(pk=document_id).values_list("tenant_id", flat=True).first()
    tenant = Tenant.objects.filter(pk=tenant_id).first() if tenant_id is not None else None
    if tenant is None:
        logger.info("document %s is gone; nothing to ingest", document_id)
        return "gone"
    with tenant_scope(tenant):
        return ingest_in_scope(document_id=document_id)


def ingest_in_scope(*, document_id: int) -> str:
    """`document_ingest` inside the tenant scope that is already active: this document alone, whatever its status,
    the whole of it at once."""
    return _ingest(document_id=document_id, run="", deadline=None, queued=False).outcome


def ingest_queued_in_scope(*, document_id: int, taken: list[int] | None = None) -> str:
    """A queued document's ingestion, whole, with the small documents queued after it in its knowledge base (what
    the task does when called directly, eagerly or with KNOWLEDGE_INGEST_SLICE_SECONDS=0): the outcome of this one,
    or TAKEN when another ingestion took it along. The ids of the queued documents taken along are added to `taken`
    (the embedded default's line then drops their turns)."""
    result = _ingest(document_id=document_id, run="", deadline=None, queued=True)
    if taken is not None:
        taken.extend(result.documents)
    return result.outcome


def ingest_share(*, document_id: int, run: str = "", seconds: float) -> tuple[str, str]:
    """One share of a queued document's ingestion (a Celery task's, inside the tenant scope): the first share takes
    the small documents queued after it along, parses and cuts them; every share embeds for about `seconds` (at
    least one batch) and keeps what it computed; the share that embeds the last text stores the chunks. Returns
    (outcome, run): CONTINUE and the run to give the next share, or the outcome of `document_ingest` (or DUPLICATE,
    TAKEN) and ""."""
    result = ingest_next_share(document_id=document_id, run=run, seconds=seconds)
    return result.outcome, result.run


def ingest_next_share(*, document_id: int, run: str = "", seconds: float, documents: Sequence[int] = ()) -> ShareResult:
    """`ingest_share` as the task calls it: `documents` are the run's documents as the previous share returned them,
    so that the run goes on (from the start) if the document naming it was deleted meanwhile."""
    return _ingest(
        document_id=document_id, run=run, deadline=time.monotonic() + seconds, queued=True, documents=documents
    )


def _ingest(
    *, document_id: int, run: str, deadline: float | None, queued: bool, documents: Sequence[int] = ()
) -> ShareResult:
    document = Document.objects.select_related("knowledge_base").filter(pk=document_id).first()
    if document is None:
        if run and documents:
            return restart(documents, deadline, lead="gone")
        return ShareResult("gone")
    knowledge_base = document.knowledge_base
    if not run and queued and document.status != DocumentStatus.PENDING:
        if document.status != DocumentStatus.PROCESSING:
            return ShareResult(TAKEN)  # another ingestion took it along and is done
        kept = kept_run(document.pk) if deadline is not None else None
        if kept is not None:
            run = kept  # a delivery of a first share again (the worker died): go on from what it kept
        elif document.updated_at >= timezone.now() - stalled_after():
            return ShareResult(TAKEN)  # another ingestion is at work on it
    if run:
        batch = Batch.resumed(knowledge_base, document, run)
        if batch is None:
            return ShareResult(DUPLICATE)  # another delivery of this run stored the chunks and cleared the shares
    else:
        members = claim_batch(document, take_queued=queued)
        if not members:
            return ShareResult(TAKEN)
        batch = Batch(knowledge_base, members, run=uuid.uuid4().hex if deadline is not None else "")
    return batch.go(deadline)
