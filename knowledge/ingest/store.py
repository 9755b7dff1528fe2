"""The last stage of an ingestion: the batch's new chunks replace the old ones in one transaction (search answers from
the old ones until then), the documents are marked ready, the knowledge base's revision is bumped once; then the
vector indexes are made sure of."""

from __future__ import annotations

import logging

import numpy as np
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext as _

from knowledge import vectorstore
from knowledge.embedders import Embedder
from knowledge.ingest.claim import Member
from knowledge.ingest.progress import STAGE_START, IngestError, Progress
from knowledge.models import Chunk, Document, DocumentStatus, IngestStage, KnowledgeBase
from knowledge.own_index import build_vector_index

logger = logging.getLogger(__name__)

WRITE_BATCH = 500


def store_batch(
    knowledge_base: KnowledgeBase,
    members: list[Member],
    embedder: Embedder,
    vectors: np.ndarray,
    terms: list[str],
    progress: Progress,
) -> None:
    """Swap the documents' chunks for the new ones and mark them ready, in one transaction (the documents whose
    file was replaced or that were queued again meanwhile are left to the newer ingestion); then make sure the
    vector index exists. `vectors` and `terms` have a row per draft of every member, in order."""
    progress.set(IngestStage.INDEX, STAGE_START[IngestStage.INDEX])
    dimension = int(vectors.shape[1])
    if not dimension:
        raise IngestError(_("The embedder returned no vectors."))
    tenant_id, knowledge_base_id, model = knowledge_base.tenant_id, knowledge_base.pk, embedder.model
    chunks: list[tuple[Member, Chunk]] = []
    row = 0
    for member in members:
        for draft in member.drafts:
            if not member.outcome:
                chunk = Chunk(
                    tenant_id=tenant_id, knowledge_base_id=knowledge_base_id, document_id=member.pk,
                    position=draft.position, text=draft.text, token_count=draft.token_count,
                    embedding=vectors[row], embedding_model=model, embedding_dim=dimension,
                    terms=terms[row], metadata=draft.metadata,
                )  # fmt: skip
                chunks.append((member, chunk))
            row += 1
    progress.set(IngestStage.INDEX, 95)
    if _swap(knowledge_base, members, embedder, chunks):
        _ensure_index(dimension)
        _ensure_own_index(knowledge_base, dimension)


@transaction.atomic
def _swap(
    knowledge_base: KnowledgeBase, members: list[Member], embedder: Embedder, chunks: list[tuple[Member, Chunk]]
) -> bool:
    live = [member for member in members if not member.outcome]
    current = dict(
        Document.objects.select_for_update()
        .filter(pk__in=[m.pk for m in live], status=DocumentStatus.PROCESSING)
        .values_list("pk", "file")
    )
    stored = [m for m in live if current.get(m.pk) == m.file]
    for member in live:
        if current.get(member.pk) != member.file:
            member.outcome = "superseded" if member.pk in current or _exists(member) else "gone"
    if not stored:
        return False
    Chunk.objects.filter(document_id__in=[m.pk for m in stored]).delete()
    Chunk.objects.bulk_create([chunk for member, chunk in chunks if member.outcome == ""], batch_size=WRITE_BATCH)
    now = timezone.now()
    by_count: dict[int, list[int]] = {}  # one UPDATE per chunk count (small documents: a handful)
    for member in stored:
        by_count.setdefault(len(member.drafts), []).append(member.pk)
    for chunk_count, ids in by_count.items():
        Document.objects.filter(pk__in=ids).update(
            status=DocumentStatus.READY,
            stage=IngestStage.DONE,
            progress=100,
            error="",
            chunk_count=chunk_count,
            embedded_with=embedder.signature(),
            ingested_at=now,
            updated_at=now,
        )
    KnowledgeBase.objects.filter(pk=knowledge_base.pk).update(revision=F("revision") + 1)
    for member in stored:
        member.outcome = "ready"
    return True


def _exists(member: Member) -> bool:
    return Document.objects.filter(pk=member.pk).exists()


def _ensure_index(dimension: int) -> None:
    try:
        with transaction.atomic():  # a savepoint: a failed CREATE INDEX must not break an outer transaction
            vectorstore.ensure_index(dimension)
    except Exception:  # the chunks are stored and searchable (exactly) without the index; the log says why
        logger.exception("could not create the vector index for dimension %s", dimension)


def _ensure_own_index(knowledge_base: KnowledgeBase, dimension: int) -> None:
    """Queue the build of the knowledge base's own HNSW index once it holds KNOWLEDGE_OWN_INDEX_MIN_CHUNKS chunks:
    a task of its own, as the build takes from seconds to minutes and a worker's ingestion shares are kept short."""
    try:
        if vectorstore.needs_own_index(knowledge_base.pk, dimension):
            build_vector_index.delay(knowledge_base.tenant_id, knowledge_base.pk, dimension)
    except Exception:  # the shared index still serves the knowledge base; the log says why
        logger.exception("could not build the vector index of knowledge base %s", knowledge_base.pk)
