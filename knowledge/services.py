"""Writes of knowledge bases and documents: create, change (re-ingesting when the embedding or chunking changes),
upload, replace, re-ingest, delete. Ingestion itself is knowledge/ingest.py, queued on commit."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from celery import current_app
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import close_old_connections, transaction
from django.db.models import F
from django.template.defaultfilters import filesizeformat
from django.utils import timezone
from django.utils.translation import gettext as _

from core.conf import setting
from knowledge import tasks
from knowledge.models import Document, DocumentStatus, IngestStage, KnowledgeBase
from knowledge.parsing import ParseError, file_type_for, max_upload_bytes
from knowledge.selectors import outdated_documents
from knowledge.vectorstore import uses_pgvector
from tenants.models import Tenant
from tenants.scope import tenant_scope

logger = logging.getLogger(__name__)

KNOWLEDGE_BASE_FIELDS = ("name", "description", "embedder", "embedding_model", "chunk_size", "chunk_overlap")
# Changing any of these makes the stored chunks or vectors stale: every document is ingested again.
REINGEST_FIELDS = ("embedder", "embedding_model", "chunk_size", "chunk_overlap")


def _validate(knowledge_base: KnowledgeBase) -> None:
    knowledge_base.full_clean()
    if knowledge_base.chunk_overlap >= knowledge_base.chunk_size:
        message = _("The overlap must be smaller than the chunk size (%(size)s tokens).")
        raise ValidationError({"chunk_overlap": message % {"size": knowledge_base.chunk_size}})


def knowledge_base_create(*, tenant: Tenant, name: str, **fields: Any) -> KnowledgeBase:
    """A new knowledge base; `fields` are any of KNOWLEDGE_BASE_FIELDS. ValidationError on bad input."""
    unknown = set(fields) - set(KNOWLEDGE_BASE_FIELDS)
    if unknown:
        raise TypeError(f"knowledge_base_create() got unknown fields: {sorted(unknown)}")
    knowledge_base = KnowledgeBase(tenant=tenant, name=name, **fields)
    _validate(knowledge_base)
    knowledge_base.save()
    return knowledge_base


def knowledge_base_changes_reingest(*, knowledge_base: KnowledgeBase, **fields: Any) -> bool:
    """True when saving `fields` would change how the knowledge base's chunks are cut or embedded."""
    return any(name in fields and fields[name] != getattr(knowledge_base, name) for name in REINGEST_FIELDS)


@transaction.atomic
def knowledge_base_update(*, knowledge_base: KnowledgeBase, **fields: Any) -> int:
    """Change a knowledge base; when the embedder or the chunking changes, every document is queued for
    re-ingestion (their current chunks stay searchable until each is replaced). Returns how many were queued."""
    unknown = set(fields) - set(KNOWLEDGE_BASE_FIELDS)
    if unknown:
        raise TypeError(f"knowledge_base_update() got unknown fields: {sorted(unknown)}")
    reingest = knowledge_base_changes_reingest(knowledge_base=knowledge_base, **fields)
    for name, value in fields.items():
        setattr(knowledge_base, name, value)
    _validate(knowledge_base)
    knowledge_base.save()
    return knowledge_base_reingest(knowledge_base=knowledge_base) if reingest else 0


@transaction.atomic
def knowledge_base_reingest(*, knowledge_base: KnowledgeBase, only_outdated: bool = False) -> int:
    """Queue every document of the knowledge base for ingestion again (or only those embedded with an older
    version of the local model: `selectors.outdated_documents`); returns how many."""
    if only_outdated:
        documents = list(outdated_documents(knowledge_base=knowledge_base))
    else:
        documents = list(Document.objects.filter(knowledge_base=knowledge_base))
    for document in documents:
        document_reingest(document=document)
    return len(documents)


@transaction.atomic
def knowledge_base_delete(*, knowledge_base: KnowledgeBase) -> None:
    """Delete a knowledge base, its documents and chunks; the stored files and its own vector indexes go once the
    deletion commits."""
    names = list(Document.objects.filter(knowledge_base=knowledge_base).values_list("file", flat=True))
    knowledge_base_id = knowledge_base.pk
    knowledge_base.delete()
    transaction.on_commit(lambda: _delete_files(names))
    if uses_pgvector():
        # robust: the deletion stands if this fails (an empty leftover index costs nothing; `vector_indexes` drops it)
        transaction.on_commit(lambda: tasks.drop_vector_indexes.delay(knowledge_base_id), robust=True)


def tenant_knowledge_delete(tenant: Tenant) -> None:
    """A tenant's knowledge bases, deleted one by one as knowledge_base_delete deletes them (their files and own
    vector indexes go after the commit): registered as the tenant's cleanup, which the rows' cascade would skip."""
    with tenant_scope(tenant):
        for knowledge_base in KnowledgeBase.objects.filter(tenant=tenant):
            knowledge_base_delete(knowledge_base=knowledge_base)


def _delete_files(names: list[str]) -> None:
    for name in names:
        if not name:
            continue
        try:
            default_storage.delete(name)
        except OSError:
            logger.warning("could not delete the stored file %s", name, exc_info=True)


def document_check_upload(*, name: str, size: int) -> str:
    """The file type of an upload named `name` of `size` bytes; ValidationError for an unsupported type, an empty
    file or one larger than KNOWLEDGE_MAX_UPLOAD_BYTES. (The content is checked when it is parsed.)"""
    try:
        file_type = file_type_for(name)
    except ParseError as exc:
        raise ValidationError(str(exc), code="file_type") from None
    if not size:
        raise ValidationError(_("“%(name)s” is empty.") % {"name": name}, code="empty")
    limit = max_upload_bytes()
    if size > limit:
        raise ValidationError(
            _("“%(name)s” is %(size)s; the largest file a knowledge base accepts is %(limit)s.")
            % {"name": name, "size": filesizeformat(size), "limit": filesizeformat(limit)},
            code="too_large",
        )
    return file_type


def _checked_upload(name: str, content: bytes) -> str:
    return document_check_upload(name=name, size=len(content))


class _IngestLine:
    """The embedded default has no worker: uploads are ingested on background threads of this process, so the
    upload answers at once and the page shows the progress, as it does with a Celery worker. One document at a time
    per tenant (with the small documents queued after it in its knowledge base: their turns are then dropped),
    tenants side by side on KNOWLEDGE_INGEST_THREADS threads, and a tenant with more documents goes to the back of
    the line after each one: one tenant's big document never holds back another tenant's small one."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waiting: dict[int, deque[int]] = {}
        self.executor: ThreadPoolExecutor | None = None

    def submit(self, tenant_id: int, document_id: int) -> None:
        with self.lock:
            line = self.waiting.get(tenant_id)
            if line is not None:  # the tenant's turn is already taken or booked: wait in its line
                line.append(document_id)
                return
            self.waiting[tenant_id] = deque([document_id])
            if self.executor is None:
                threads = max(1, int(setting("KNOWLEDGE_INGEST_THREADS")))
                self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="knowledge-ingest")
            executor = self.executor
        executor.submit(self._one, tenant_id)

    def _one(self, tenant_id: int) -> None:
        with self.lock:
            document_id = self.waiting[tenant_id].popleft()
        taken: list[int] = []
        try:
            taken = tasks.ingest_queued(tenant_id, document_id)[1]
        except Exception:
            logger.exception("background ingestion of document %s failed", document_id)
        finally:
            close_old_connections()
            with self.lock:
                line = self.waiting[tenant_id]
                for taken_id in taken:  # ingested along with this one: their turns are spent (the first of each)
                    with contextlib.suppress(ValueError):  # not booked yet (its upload's commit callback is to come)
                        line.remove(taken_id)
                more = bool(line)
                if not more:
                    del self.waiting[tenant_id]
                executor = self.executor
            if more and executor is not None:
                executor.submit(self._one, tenant_id)  # to the back of the line: other tenants go first


_ingest_line = _IngestLine()


def _ingest_in_background(tenant_id: int, document_id: int) -> None:
    _ingest_line.submit(tenant_id, document_id)


def _queue_ingest(document: Document, queue: bool = True) -> None:
    if not queue:  # the caller ingests it itself (demo data, the benchmark)
        return
    tenant_id, document_id = document.tenant_id, document.pk
    if current_app.conf.task_always_eager and settings.KNOWLEDGE_INGEST_IN_THREAD:
        transaction.on_commit(lambda: _ingest_in_background(tenant_id, document_id))
    else:
        transaction.on_commit(lambda: tasks.ingest_document.delay(tenant_id, document_id))


@transaction.atomic
def document_add(*, knowledge_base: KnowledgeBase, name: str, content: bytes, queue: bool = True) -> Document:
    """Store an uploaded file and queue its ingestion (once this commits; `queue=False` leaves that to the caller,
    e.g. `knowledge.ingest.document_ingest`). A file with the name of a document already in the knowledge base
    replaces that document's file. ValidationError for a bad type or size."""
    name = (name or "").replace("\\", "/").rsplit("/", 1)[-1].strip()[:255]
    file_type = _checked_upload(name, content)
    existing = Document.objects.filter(knowledge_base=knowledge_base, name=name).first()
    if existing is not None:
        return document_replace(document=existing, content=content, queue=queue)
    document = Document(
        tenant_id=knowledge_base.tenant_id,
        knowledge_base=knowledge_base,
        name=name,
        file_type=file_type,
        size=len(content),
        sha256=hashlib.sha256(content).hexdigest(),
        status=DocumentStatus.PENDING,
        stage=IngestStage.QUEUED,
    )
    document.file.save(name, ContentFile(content), save=False)
    document.save()
    _queue_ingest(document, queue)
    return document


@transaction.atomic
def document_replace(*, document: Document, content: bytes, queue: bool = True) -> Document:
    """A new version of a document's file: stored, and ingested again (the old chunks answer searches until the
    new ones replace them). The same content as before changes nothing unless the last ingestion failed."""
    _checked_upload(document.name, content)
    digest = hashlib.sha256(content).hexdigest()
    if digest == document.sha256 and document.status != DocumentStatus.FAILED:
        return document
    old_name = document.file.name
    document.file.save(document.name, ContentFile(content), save=False)
    document.size = len(content)
    document.sha256 = digest
    document.save(update_fields=["file", "size", "sha256", "updated_at"])
    transaction.on_commit(lambda: _delete_files([old_name]))
    return document_reingest(document=document, queue=queue)


@transaction.atomic
def document_reingest(*, document: Document, queue: bool = True) -> Document:
    """Queue a document for ingestion again (after a failure, a stall, or a change of the knowledge base)."""
    now = timezone.now()
    Document.objects.filter(pk=document.pk).update(
        status=DocumentStatus.PENDING, stage=IngestStage.QUEUED, progress=0, error="", updated_at=now
    )
    document.status, document.stage, document.progress, document.error = (
        DocumentStatus.PENDING,
        IngestStage.QUEUED,
        0,
        "",
    )
    document.updated_at = now
    _queue_ingest(document, queue)
    return document


@transaction.atomic
def document_delete(*, document: Document) -> None:
    """Delete a document and its chunks (search stops finding them at once); its file goes after the commit."""
    name = document.file.name
    knowledge_base_id = document.knowledge_base_id
    document.delete()
    KnowledgeBase.objects.filter(pk=knowledge_base_id).update(revision=F("revision") + 1)
    transaction.on_commit(lambda: _delete_files([name]))
