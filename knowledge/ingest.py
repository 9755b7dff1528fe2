"""Ingestion of one document (K2): parse -> chunk -> embed in batches -> write chunks -> index.

`document_ingest(document_id=...)` runs every stage synchronously inside the document's tenant scope; the embedded
default's ingestion threads and the benchmark call it. On a Celery worker, `ingest_share` does it in shares of about
KNOWLEDGE_INGEST_SLICE_SECONDS of embedding, each a task that keeps what it computed (`IngestShare` rows) and queues
the next one behind whatever else waits: one worker goes round the documents of every tenant, so a tenant's big
document never holds back another tenant's small one. Progress is written as it goes (one UPDATE of the status,
stage, progress and updated_at columns, only when the whole percentage changes):

    parse 0-10 %, chunk 10-20 %, embed 20-90 % (batch by batch), index 90-100 %.

The new chunks replace the old ones in one transaction at the end, so search keeps answering from the old chunks
while a document is re-ingested. A failure marks the document failed with a message for its row (the traceback
goes to the log only); the document's previous chunks, if any, stay searchable; other documents are unaffected.
"""

from __future__ import annotations

import io
import json
import logging
import time
import uuid
from collections.abc import Callable

import numpy as np
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext as _

from core.conf import setting
from knowledge.chunking import ChunkDraft, chunk_sections
from knowledge.embedders import Embedder, EmbedderError, embedder_for
from knowledge.keyword import terms_for
from knowledge.models import Chunk, Document, DocumentStatus, IngestShare, IngestStage, KnowledgeBase
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
# The outcome of a share after which the document's ingestion goes on in another task (the run is passed on).
CONTINUE = "continue"
# The outcome of a delivery whose run another delivery of the same task finished or is doing (a worker died after it
# queued the next share but before the broker heard that this one was done).
DUPLICATE = "duplicate"


class IngestError(Exception):
    """A stage failed for a reason the user can act on; the message goes on the document's row."""


class IngestCancelled(Exception):
    """The document was deleted, or its file replaced, while it was ingested: the work stops (nothing is stored)."""


class ShareTaken(Exception):
    """Another delivery of the same run stored this share first: it goes on from there, this one stops."""


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
    """`document_ingest` inside the tenant scope that is already active, the whole document at once."""
    outcome, _run = _ingest(document_id=document_id, run="", deadline=None)
    return outcome


def ingest_share(*, document_id: int, run: str = "", seconds: float) -> tuple[str, str]:
    """One share of a document's ingestion (a Celery task's, inside the tenant scope): the first share parses and
    cuts the document; every share embeds for about `seconds` (at least one batch) and keeps what it computed; the
    share that embeds the last text stores the chunks. Returns (outcome, run): CONTINUE and the run to give the next
    share, or the outcome of `document_ingest` (or DUPLICATE) and ""."""
    return _ingest(document_id=document_id, run=run, deadline=time.monotonic() + seconds)


def _ingest(*, document_id: int, run: str, deadline: float | None) -> tuple[str, str]:
    document = Document.objects.select_related("knowledge_base").filter(pk=document_id).first()
    if document is None:
        return "gone", ""
    started = time.perf_counter()
    progress = _Progress(document.pk)
    resume = bool(run)
    if not resume:
        Document.objects.filter(pk=document.pk).update(
            status=DocumentStatus.PROCESSING,
            stage=IngestStage.PARSE,
            progress=0,
            error="",
            updated_at=timezone.now(),
        )
        progress.stage, progress.percent = IngestStage.PARSE, 0
        run = uuid.uuid4().hex if deadline is not None else ""
    try:
        outcome = _run_stages(document, progress, run=run, resume=resume, deadline=deadline)
    except ShareTaken:
        return DUPLICATE, ""
    except IngestCancelled:
        _forget(run)
        logger.info("document %s (%s): deleted or replaced while ingested; stopped", document.pk, document.name)
        return "gone", ""
    except (ParseError, EmbedderError, IngestError) as exc:
        _forget(run)
        _fail(document, str(exc))
        logger.info("document %s (%s) failed at %s: %s", document.pk, document.name, progress.stage, exc)
        return "failed", ""
    except Exception as exc:  # anything else: the row gets a short reason, the log gets the traceback
        _forget(run)
        logger.exception("document %s (%s) failed at %s", document.pk, document.name, progress.stage)
        stage = IngestStage(progress.stage).label if progress.stage else ""
        _fail(
            document,
            _("Unexpected error while %(stage)s: %(error)s. The details are in the server log; re-ingest to retry.")
            % {"stage": str(stage).lower(), "error": exc.__class__.__name__},
        )
        return "failed", ""
    elapsed = time.perf_counter() - started
    if outcome == CONTINUE:
        logger.info("document %s (%s): a share of its ingestion in %.2fs", document.pk, document.name, elapsed)
        return outcome, run
    if outcome != DUPLICATE:
        _forget(run)
    logger.info("document %s (%s): %s in %.2fs", document.pk, document.name, outcome, elapsed)
    return outcome, ""


def _run_stages(document: Document, progress: _Progress, *, run: str, resume: bool, deadline: float | None) -> str:
    knowledge_base = document.knowledge_base
    if resume:
        first = IngestShare.objects.filter(document_id=document.pk, run=run, number=0).first()
        if first is None:
            return DUPLICATE  # another delivery of this run stored the chunks and cleared the shares
        file_name = first.file
        if file_name != document.file.name:
            return "superseded"
        drafts = _drafts_from(bytes(first.data))
    else:
        file_name = document.file.name
        data = _read(document)
        sections = parse_document(data, document.file_type)

        progress.set(IngestStage.CHUNK, STAGE_START[IngestStage.CHUNK])
        drafts = chunk_sections(
            sections, chunk_size=knowledge_base.chunk_size, chunk_overlap=knowledge_base.chunk_overlap
        )
        if not drafts:
            raise ParseError(_("No text was found in the file."))
        if len(drafts) > setting("KNOWLEDGE_MAX_CHUNKS"):
            raise over_limit(_("%(count)s chunks") % {"count": f"{len(drafts):,}"}, "KNOWLEDGE_MAX_CHUNKS")
        if run:
            IngestShare.objects.create(
                tenant_id=document.tenant_id, document_id=document.pk, run=run, number=0, file=file_name,
                count=len(drafts), data=_drafts_bytes(drafts),
            )  # fmt: skip

    def still_wanted() -> bool:
        return Document.objects.filter(pk=document.pk, file=file_name).exists()

    if not resume:
        progress.set(IngestStage.EMBED, STAGE_START[IngestStage.EMBED])
    embedder = embedder_for(knowledge_base)
    texts = [draft.text for draft in drafts]
    if deadline is None:
        vectors = embed_in_batches(embedder, texts, progress, still_wanted)
    else:
        share = _embed_share(embedder, texts, document, run, file_name, progress, still_wanted, deadline)
        if share is None:
            return CONTINUE
        vectors = share

    progress.set(IngestStage.INDEX, STAGE_START[IngestStage.INDEX])
    terms = [" ".join(terms_for(draft.text)) for draft in drafts]
    progress.set(IngestStage.INDEX, 95)
    if not _replace_chunks(document, file_name, drafts, vectors, terms, embedder):
        return "superseded"
    _ensure_index(int(vectors.shape[1]))
    return "ready"


def _embed_share(
    embedder: Embedder,
    texts: list[str],
    document: Document,
    run: str,
    file_name: str,
    progress: _Progress,
    still_wanted: Callable[[], bool],
    deadline: float,
) -> np.ndarray | None:
    """Embed the run's next texts until `deadline` (at least one batch) and keep them as the next share; None while
    texts remain, else every text's embedding (rows in `texts` order) from the run's shares. ShareTaken when another
    delivery of the run stored this share first."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # as embed_in_batches: shortest first
    shares = list(
        IngestShare.objects.filter(run=run, number__gt=0).order_by("number").values_list("number", "start", "count")
    )
    done = sum(count for _number, _start, count in shares)  # shares follow each other in embedding order
    if done < len(order):
        pieces: list[np.ndarray] = []
        position = done
        while position < len(order) and (position == done or time.monotonic() < deadline):
            if position and not still_wanted():
                raise IngestCancelled
            batch = order[position : position + EMBED_BATCH]
            pieces.append(_embed_batch(embedder, [texts[i] for i in batch]))
            position += len(batch)
            progress.set(IngestStage.EMBED, _embed_percent(position, len(order)))
        block = np.concatenate(pieces)
        number = shares[-1][0] + 1 if shares else 1
        try:
            with transaction.atomic():
                IngestShare.objects.create(
                    tenant_id=document.tenant_id, document_id=document.pk, run=run, file=file_name,
                    number=number, start=done, count=len(block), data=_npy(block),
                )  # fmt: skip
        except IntegrityError:
            raise ShareTaken from None
        if position < len(order):
            return None
        shares.append((number, done, len(block)))
    rows: np.ndarray | None = None
    for number, start, count in shares:
        vectors = _share_vectors(run, number)
        if rows is None:
            rows = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
        elif vectors.shape[1] != rows.shape[1]:
            raise IngestError(_("The embedder changed its vector size in the middle of a document."))
        rows[order[start : start + count]] = vectors
    return rows if rows is not None else np.zeros((0, 0), dtype=np.float32)


def _share_vectors(run: str, number: int) -> np.ndarray:
    data = IngestShare.objects.filter(run=run, number=number).values_list("data", flat=True).get()
    return np.load(io.BytesIO(bytes(data)), allow_pickle=False)


def _npy(vectors: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, vectors.astype(np.float32), allow_pickle=False)
    return out.getvalue()


def _drafts_bytes(drafts: list[ChunkDraft]) -> bytes:
    rows = [[draft.position, draft.text, draft.token_count, draft.metadata] for draft in drafts]
    return json.dumps(rows, ensure_ascii=False, separators=(",", ":")).encode()


def _drafts_from(data: bytes) -> list[ChunkDraft]:
    return [ChunkDraft(position, text, tokens, metadata) for position, text, tokens, metadata in json.loads(data)]


def _forget(run: str) -> None:
    """Drop what a run kept between its shares (it ended)."""
    if run:
        IngestShare.objects.filter(run=run).delete()


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
    for start in range(0, len(order), EMBED_BATCH):
        if start and still_wanted is not None and not still_wanted():
            raise IngestCancelled
        batch = order[start : start + EMBED_BATCH]
        vectors = _embed_batch(embedder, [texts[i] for i in batch])
        if rows is None:
            rows = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
        elif vectors.shape[1] != rows.shape[1]:
            raise IngestError(_("The embedder changed its vector size in the middle of a document."))
        rows[batch] = vectors
        if progress is not None:
            progress.set(IngestStage.EMBED, _embed_percent(min(start + EMBED_BATCH, len(order)), len(order)))
    return rows if rows is not None else np.zeros((0, 0), dtype=np.float32)


def _embed_batch(embedder: Embedder, texts: list[str]) -> np.ndarray:
    """The embeddings of one batch, checked: one finite vector per text."""
    vectors = np.asarray(embedder.embed(texts), dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != len(texts) or vectors.shape[1] == 0:
        raise IngestError(
            _("The embedder returned %(got)s vectors for %(expected)s texts.")
            % {"got": vectors.shape[0] if vectors.ndim == 2 else 0, "expected": len(texts)}
        )
    if not np.isfinite(vectors).all():
        raise IngestError(_("The embedder returned invalid numbers (NaN or infinity)."))
    return vectors


def _embed_percent(done: int, total: int) -> float:
    """Progress once `done` of `total` texts are embedded: from the embed stage's start to the index stage's."""
    start, end = STAGE_START[IngestStage.EMBED], STAGE_START[IngestStage.INDEX]
    return start + (end - start) * done / total


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
