"""Which documents an ingestion takes, and whose they are while it works: a queued small document takes the small
documents queued after it in its knowledge base along; a row left processing by a worker that died is taken again;
one deleted, replaced or queued again meanwhile is no longer the batch's."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core.conf import setting
from knowledge.chunking import ChunkDraft
from knowledge.models import Document, DocumentStatus, IngestShare, IngestStage
from tenants.scope import all_tenants

logger = logging.getLogger(__name__)

# A queued document of at most SMALL_DOCUMENT_BYTES takes the small documents queued after it in its knowledge base
# along, up to BATCH_DOCUMENTS and BATCH_BYTES in all (about 6 s of the local model's embedding at most, so the first
# of them is not kept waiting long, and a second worker finds the next ones still queued).
SMALL_DOCUMENT_BYTES = 64 * 1024
BATCH_DOCUMENTS = 200
BATCH_BYTES = 256 * 1024
# The outcome of a queued document's task when another ingestion took the document along (or is ingesting it).
TAKEN = "taken"


@dataclass(eq=False)  # compared and hashed by identity
class Member:
    """A document of a batch, with the chunks it was cut into; `outcome` is set when it leaves the batch."""

    pk: int
    name: str
    file: str
    file_type: str = ""
    drafts: list[ChunkDraft] = field(default_factory=list)
    outcome: str = ""
    queued: bool = False  # taken from the queue (its own task is still to come, and will find it taken)


def queued_is_taken(*, tenant_id: int, document_id: int, on_worker: bool) -> bool:
    """True when a queued document's own task has nothing to do because another ingestion took it along (it is
    ready or failed, or being ingested and not stalled, and on a worker not the first document of a kept run). One
    query (two on a worker for a document being ingested) and no tenant lookup: a batch's documents' own tasks cost
    next to nothing."""
    with all_tenants(reason="knowledge ingestion: is a queued document still waiting (its tenant's, by id)"):
        row = Document.objects.filter(pk=document_id, tenant_id=tenant_id).values_list("status", "updated_at").first()
        if row is None or row[0] == DocumentStatus.PENDING:
            return False
        if row[0] != DocumentStatus.PROCESSING:
            return True
        if row[1] < timezone.now() - stalled_after():
            return False
        return not (on_worker and IngestShare.objects.filter(document_id=document_id, number=0).exists())


def stalled_after() -> dt.timedelta:
    return dt.timedelta(seconds=float(setting("KNOWLEDGE_STALLED_AFTER_SECONDS")))


def kept_run(document_id: int) -> str | None:
    """The run whose first share the document heads (a worker died after keeping it), if any."""
    return (
        IngestShare.objects.filter(document_id=document_id, number=0)
        .order_by("-created_at", "-id")
        .values_list("run", flat=True)
        .first()
    )


def claim_batch(document: Document, *, take_queued: bool) -> list[Member]:
    """Mark the document being ingested (if it is still this task's to do) and, for a queued small document, the
    small documents queued after it in its knowledge base (documents another worker is claiming are skipped, rows
    left by a worker that died mid-way are taken again); the batch's members, this document first."""
    now = timezone.now()
    fields = {"status": DocumentStatus.PROCESSING, "stage": IngestStage.PARSE, "progress": 0, "error": ""}
    with transaction.atomic():
        mine = Document.objects.filter(pk=document.pk)
        if take_queued:
            mine = mine.filter(_claimable(now))
        if not mine.update(**fields, updated_at=now):
            return []
        members = [Member(document.pk, document.name, document.file.name, document.file_type)]
        if not take_queued or document.size > SMALL_DOCUMENT_BYTES:
            return members
        candidates = (
            Document.objects.select_for_update(skip_locked=True)
            .filter(_claimable(now), knowledge_base_id=document.knowledge_base_id, size__lte=SMALL_DOCUMENT_BYTES)
            .exclude(pk=document.pk)
            .order_by("pk")
            .values_list("pk", "name", "file", "file_type", "size", "status")[: BATCH_DOCUMENTS - 1]
        )
        total = document.size
        for pk, name, file_name, file_type, size, status in candidates:
            if total + size > BATCH_BYTES:
                break
            total += size
            members.append(Member(pk, name, file_name, file_type, queued=status == DocumentStatus.PENDING))
        if len(members) > 1:
            Document.objects.filter(pk__in=[member.pk for member in members[1:]]).update(**fields, updated_at=now)
    return members


def _claimable(now: dt.datetime) -> Q:
    """Queued, or left processing with no progress for KNOWLEDGE_STALLED_AFTER_SECONDS (its worker died)."""
    stalled = Q(status=DocumentStatus.PROCESSING, updated_at__lt=now - stalled_after())
    return Q(status=DocumentStatus.PENDING) | stalled


def claim_again(documents: Sequence[int]) -> tuple[list[Member], int] | None:
    """The documents of a lost run that are still being ingested, claimed afresh (stage parse), and their knowledge
    base (a run's documents share one)."""
    rows = list(
        Document.objects.filter(pk__in=list(documents), status=DocumentStatus.PROCESSING)
        .order_by("pk")
        .values_list("pk", "name", "file", "file_type", "knowledge_base_id")
    )
    if not rows:
        return None
    Document.objects.filter(pk__in=[row[0] for row in rows], status=DocumentStatus.PROCESSING).update(
        stage=IngestStage.PARSE, progress=0, updated_at=timezone.now()
    )
    return [Member(pk, name, file_name, file_type) for pk, name, file_name, file_type, _kb in rows], rows[0][4]


def drop_unwanted(members: list[Member]) -> None:
    """Mark the members deleted ("gone"), replaced or queued again ("superseded") since the batch began: they are
    no longer the batch's (one query)."""
    current = {
        pk: (file_name, status)
        for pk, file_name, status in Document.objects.filter(pk__in=[m.pk for m in members]).values_list(
            "pk", "file", "status"
        )
    }
    for member in members:
        found = current.get(member.pk)
        if found is None:
            member.outcome = "gone"
        elif found != (member.file, DocumentStatus.PROCESSING):
            member.outcome = "superseded"
        if member.outcome:
            logger.info("document %s (%s): deleted or replaced while ingested; stopped", member.pk, member.name)
