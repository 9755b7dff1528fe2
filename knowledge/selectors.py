"""Reads of knowledge bases and documents for the pages, the progress endpoint and the admin."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db.models import Count, Q, QuerySet, Sum
from django.utils import timezone

from core.conf import setting
from knowledge.embedders import local_embedder
from knowledge.models import LOCAL_KINDS, Document, DocumentStatus, KnowledgeBase


def stalled_after() -> dt.timedelta:
    """How long a waiting or processing document may go without a progress update before the page calls it
    stalled (setting KNOWLEDGE_STALLED_AFTER_SECONDS, default 10 minutes)."""
    return dt.timedelta(seconds=int(setting("KNOWLEDGE_STALLED_AFTER_SECONDS")))


def document_is_stalled(document: Document, *, now: dt.datetime | None = None) -> bool:
    """Waiting or processing with no progress for `stalled_after()`: the worker died or none is running."""
    if document.status not in (DocumentStatus.PENDING, DocumentStatus.PROCESSING):
        return False
    return (now or timezone.now()) - document.updated_at > stalled_after()


def knowledge_base_list_for_page() -> list[KnowledgeBase]:
    """The scope's knowledge bases with `document_count`, `chunk_total`, `ready_count` and `busy_count`."""
    busy = Q(documents__status__in=[DocumentStatus.PENDING, DocumentStatus.PROCESSING])
    return list(
        KnowledgeBase.objects.annotate(
            document_count=Count("documents"),
            ready_count=Count("documents", filter=Q(documents__status=DocumentStatus.READY)),
            failed_count=Count("documents", filter=Q(documents__status=DocumentStatus.FAILED)),
            busy_count=Count("documents", filter=busy),
            chunk_total=Sum("documents__chunk_count"),
        ).order_by("name")
    )


def knowledge_base_get(*, knowledge_base_id: int) -> KnowledgeBase:
    """The scope's knowledge base; KnowledgeBase.DoesNotExist for another tenant's id (never a leak)."""
    return KnowledgeBase.objects.get(pk=knowledge_base_id)


def document_get(*, knowledge_base: KnowledgeBase, document_id: int) -> Document:
    """A document of `knowledge_base`; Document.DoesNotExist for any other id."""
    return Document.objects.select_related("knowledge_base").get(pk=document_id, knowledge_base=knowledge_base)


def document_list(*, knowledge_base: KnowledgeBase) -> list[Document]:
    """The knowledge base's documents, newest first, each with `stalled` set."""
    documents = list(Document.objects.filter(knowledge_base=knowledge_base).order_by("-created_at", "-id"))
    now = timezone.now()
    for document in documents:
        document.stalled = document_is_stalled(document, now=now)
    return documents


def document_progress(*, knowledge_base: KnowledgeBase) -> dict[str, Any]:
    """What the documents table polls: each document's status, stage, progress, error and chunk count, and
    whether anything is still moving (the page stops polling when nothing is)."""
    rows = (
        Document.objects.filter(knowledge_base=knowledge_base)
        .order_by("-created_at", "-id")
        .only("id", "name", "status", "stage", "progress", "error", "chunk_count", "updated_at", "knowledge_base")
    )
    now = timezone.now()
    documents = []
    active = False
    for document in rows:
        stalled = document_is_stalled(document, now=now)
        moving = document.status in (DocumentStatus.PENDING, DocumentStatus.PROCESSING) and not stalled
        active = active or moving
        documents.append(
            {
                "id": document.pk,
                "name": document.name,
                "status": document.status,
                "status_label": str(document.get_status_display()),
                "stage": document.stage,
                "stage_label": str(document.get_stage_display()),
                "progress": document.progress,
                "error": document.error,
                "chunk_count": document.chunk_count,
                "stalled": stalled,
            }
        )
    return {"knowledge_base": knowledge_base.pk, "active": active, "documents": documents}


def outdated_documents(*, knowledge_base: KnowledgeBase) -> QuerySet[Document]:
    """Ready documents of a knowledge base on the local model whose vectors come from another version of it
    (stored before an upgrade changed the model): vector search skips their chunks until they are ingested
    again. Provider knowledge bases re-ingest when their model setting changes, so none is outdated."""
    if knowledge_base.embedder not in LOCAL_KINDS:
        return Document.objects.none()
    return Document.objects.filter(knowledge_base=knowledge_base, status=DocumentStatus.READY).exclude(
        embedded_with=local_embedder(knowledge_base.embedder).signature()
    )
