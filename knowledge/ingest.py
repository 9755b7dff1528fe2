"""Ingestion of one document (K2): parse -> chunk -> embed in batches -> write chunks -> index.

`document_ingest(document_id=...)` runs every stage synchronously inside the document's tenant scope; the Celery
task `knowledge.tasks.ingest_document` and the benchmark call it. Progress is written as it goes (one UPDATE of
the status, stage, progress and updated_at columns, only when the whole percentage changes):

    parse 0-10 %, chunk 10-20 %, embed 20-90 % (batch by batch), index 90-100 %.

The new chunks replace the old ones in one transaction at the end, so search keeps answering from the old chunks
while a document is re-ingested. A failure marks the document failed with a message for its row (the traceback
goes to the log only); the document's previous chunks, if any, stay searchable; other documents are unaffected.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import numpy as np
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext as _

from core.conf import setting
from knowledge.chunking import ChunkDraft, chunk_sections
from knowledge.embedders import Embedder, EmbedderError, embedder_for
from knowledge.keyword import terms_for
from knowledge.models import Chunk, Document, DocumentStatus, IngestStage, KnowledgeBase
from knowledge.parsing import ParseError, over_limit, parse_document
from tenants.models import Tenant
from tenants.scope import all_tenants, tenant_scope

logger = logging.getLogger(__name__)

# Where each stage starts, in percent; embedding fills the span up to the index stage.
STAGE_START = {IngestStage.PARSE: 0, IngestStage.CHUNK: 10, IngestStage.EMBED: 20, IngestStage.INDEX: 90}
# Texts per embedder call: progress is written after each call. Texts are sorted by length first, so each call
# (and the embedder's own smaller batches) pads little.
EMBED_BATCH = 64
WRITE_BATCH = 500


class IngestError(Exception):
    """A stage failed for a reason the user can act on; the message goes on the document's row."""


class IngestCancelled(Exception):
    """The document was deleted, or its file replaced, while it was ingested: the work stops (nothing is stored)."""


class _Progress:
    """Writes a document's stage and progress, cheaply and only when they change."""

    def __init__(self, document_id: int) -> None:
        self.document_id = document_id
        self.stage: str | None = None
        self.percent = -1

    def set(self, stage: str, percent: float) -> None:
        percent = max(0, min(99, int(percent)))  # 100 is written with the chunks, never before
        if stage == self.stage and percent == self.percent:
            return
        fields = {"progress": percent, "updated_at": timezone.now()}
        if stage != self.stage:
            fields["stage"] = stage
        Document.objects.filter(pk=self.document_id).update(**fields)
        self.stage, self.percent = stage, percent


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
    """`document_ingest` inside the tenant scope that is already active (the Celery task enters it)."""
    document = Document.objects.select_related("knowledge_base").filter(pk=document_id).first()
    if document is None:
        return "gone"
    started = time.perf_counter()
    progress = _Progress(document.pk)
    Document.objects.filter(pk=document.pk).update(
        status=DocumentStatus.PROCESSING,
        stage=IngestStage.PARSE,
        progress=0,
        error="",
        updated_at=timezone.now(),
    )
    progress.stage, progress.percent = IngestStage.PARSE, 0
    try:
        outcome = _run_stages(document, progress)
    except IngestCancelled:
        logger.info("document %s (%s): deleted or replaced while ingested; stopped", document.pk, document.name)
        return "gone"
    except (ParseError, EmbedderError, IngestError) as exc:
        _fail(document, str(exc))
        logger.info("document %s (%s) failed at %s: %s", document.pk, document.name, progress.stage, exc)
        return "failed"
    except Exception as exc:  # anything else: the row gets a short reason, the log gets the traceback
        logger.exception("document %s (%s) failed at %s", document.pk, document.name, progress.stage)
        stage = IngestStage(progress.stage).label if progress.stage else ""
        _fail(
            document,
            _("Unexpected error while %(stage)s: %(error)s. The details are in the server log; re-ingest to retry.")
            % {"stage": str(stage).lower(), "error": exc.__class__.__name__},
        )
        return "failed"
    logger.info("document %s (%s): %s in %.2fs", document.pk, document.name, outcome, time.perf_counter() - started)
    return outcome


def _run_stages(document: Document, progress: _Progress) -> str:
    knowledge_base = document.knowledge_base
    file_name = document.file.name

    data = _read(document)
    sections = parse_document(data, document.file_type)

    progress.set(IngestStage.CHUNK, STAGE_START[IngestStage.CHUNK])
    drafts = chunk_sections(sections, chunk_size=knowledge_base.chunk_size, chunk_overlap=knowledge_base.chunk_overlap)
    if not drafts:
        raise ParseError(_("No text was found in the file."))
    if len(drafts) > setting("KNOWLEDGE_MAX_CHUNKS"):
        raise over_limit(_("%(count)s chunks") % {"count": f"{len(drafts):,}"}, "KNOWLEDGE_MAX_CHUNKS")

    def still_wanted() -> bool:
        return Document.objects.filter(pk=document.pk, file=file_name).exists()

    progress.set(IngestStage.EMBED, STAGE_START[IngestStage.EMBED])
    embedder = embedder_for(knowledge_base)
    vectors = embed_in_batches(embedder, [draft.text for draft in drafts], progress, still_wanted)

    progress.set(IngestStage.INDEX, STAGE_START[IngestStage.INDEX])
    terms = [" ".join(terms_for(draft.text)) for draft in drafts]
    progress.set(IngestStage.INDEX, 95)
    if not _replace_chunks(document, file_name, drafts, vectors, terms, embedder):
        return "superseded"
    _ensure_index(int(vectors.shape[1]))
    return "ready"


def _read(document: Document) -> bytes:
    try:
        with document.file.open("rb") as handle:
            return handle.read()
    except (FileNotFoundError, OSError, ValueError) as exc:
        raise IngestError(_("The uploaded file is missing from storage. Upload it again.")) from exc


def embed_in_batches(
    embedder: Embedder,
    texts: list[str],
    progress: _Progress | None = None,
    still_wanted: Callable[[], bool] | None = None,
) -> np.ndarray:
    """Embeddings of `texts` (rows in the same order), computed shortest first in batches of EMBED_BATCH, with
    progress moving from the embed stage's start to the index stage's start after each batch. Before each batch
    after the first, `still_wanted()` (one query) says whether the document still exists as it was; if not,
    IngestCancelled."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    rows: np.ndarray | None = None
    start_percent, end_percent = STAGE_START[IngestStage.EMBED], STAGE_START[IngestStage.INDEX]
    for start in range(0, len(order), EMBED_BATCH):
        if start and still_wanted is not None and not still_wanted():
            raise IngestCancelled
        batch = order[start : start + EMBED_BATCH]
        vectors = np.asarray(embedder.embed([texts[i] for i in batch]), dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(batch) or vectors.shape[1] == 0:
            raise IngestError(
                _("The embedder returned %(got)s vectors for %(expected)s texts.")
                % {"got": vectors.shape[0] if vectors.ndim == 2 else 0, "expected": len(batch)}
            )
        if not np.isfinite(vectors).all():
            raise IngestError(_("The embedder returned invalid numbers (NaN or infinity)."))
        if rows is None:
            rows = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
        elif vectors.shape[1] != rows.shape[1]:
            raise IngestError(_("The embedder changed its vector size in the middle of a document."))
        rows[batch] = vectors
        if progress is not None:
            done = min(start + EMBED_BATCH, len(order))
            progress.set(IngestStage.EMBED, start_percent + (end_percent - start_percent) * done / len(order))
    return rows if rows is not None else np.zeros((0, 0), dtype=np.float32)


@transaction.atomic
def _replace_chunks(
    document: Document,
    file_name: str,
    drafts: list[ChunkDraft],
    vectors: np.ndarray,
    terms: list[str],
    embedder: Embedder,
) -> bool:
    """Swap the document's chunks for the new ones and mark it ready, in one transaction. False when the
    document's file was replaced while this ran (the ingestion queued for the new file does the work)."""
    current = Document.objects.select_for_update().filter(pk=document.pk).values("file").first()
    if current is None or current["file"] != file_name:
        return False
    dimension = int(vectors.shape[1])
    Chunk.objects.filter(document_id=document.pk).delete()
    Chunk.objects.bulk_create(
        [
            Chunk(
                tenant_id=document.tenant_id,
                knowledge_base_id=document.knowledge_base_id,
                document_id=document.pk,
                position=draft.position,
                text=draft.text,
                token_count=draft.token_count,
                embedding=vector,
                embedding_model=embedder.model,
                embedding_dim=dimension,
                terms=term_text,
                metadata=draft.metadata,
            )
            for draft, vector, term_text in zip(drafts, vectors, terms, strict=True)
        ],
        batch_size=WRITE_BATCH,
    )
    now = timezone.now()
    Document.objects.filter(pk=document.pk).update(
        status=DocumentStatus.READY,
        stage=IngestStage.DONE,
        progress=100,
        error="",
        chunk_count=len(drafts),
        embedded_with=embedder.signature(),
        ingested_at=now,
        updated_at=now,
    )
    KnowledgeBase.objects.filter(pk=document.knowledge_base_id).update(revision=F("revision") + 1)
    return True


def _ensure_index(dimension: int) -> None:
    from knowledge import vectorstore

    try:
        with transaction.atomic():  # a savepoint: a failed CREATE INDEX must not break an outer transaction
            vectorstore.ensure_index(dimension)
    except Exception:  # the chunks are stored and searchable (exactly) without the index; the log says why
        logger.exception("could not create the vector index for dimension %s", dimension)


def _fail(document: Document, message: str) -> None:
    Document.objects.filter(pk=document.pk).update(
        status=DocumentStatus.FAILED, error=message[:2000], updated_at=timezone.now()
    )
