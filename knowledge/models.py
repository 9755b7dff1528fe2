"""Knowledge bases (K1-K5): a tenant's documents, cut into chunks that carry an embedding and keyword terms."""

from __future__ import annotations

import uuid

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from knowledge.fields import EmbeddingField
from tenants.models import TenantOwned


class EmbedderKind(models.TextChoices):
    LOCAL_MULTILINGUAL = (
        "local_multilingual",
        _("Local multilingual model (multilingual-e5-small, offline, Chinese and English)"),
    )
    LOCAL = "local", _("Local model (all-MiniLM-L6-v2, offline, English)")
    PROVIDER = "provider", _("The tenant's model provider (OpenAI-compatible embeddings endpoint)")


# The embedders that run on this server (their model can change with an upgrade: reingest_outdated).
LOCAL_KINDS = (EmbedderKind.LOCAL, EmbedderKind.LOCAL_MULTILINGUAL)


class KnowledgeBase(TenantOwned):
    name = models.CharField(_("name"), max_length=120)
    description = models.TextField(_("description"), blank=True)
    embedder = models.CharField(
        _("embedder"), max_length=20, choices=EmbedderKind.choices, default=EmbedderKind.LOCAL_MULTILINGUAL
    )
    embedding_model = models.CharField(
        _("embedding model"),
        max_length=200,
        blank=True,
        help_text=_("For the provider embedder: the model name (empty: the provider's embedding model)."),
    )
    chunk_size = models.PositiveIntegerField(
        _("chunk size (tokens)"), default=200, validators=[MinValueValidator(32), MaxValueValidator(2000)]
    )
    chunk_overlap = models.PositiveIntegerField(
        _("chunk overlap (tokens)"), default=30, validators=[MaxValueValidator(500)]
    )
    # Bumped whenever the chunks change, so per-process search indexes know when to rebuild.
    revision = models.PositiveIntegerField(_("revision"), default=0, editable=False)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        verbose_name = _("knowledge base")
        verbose_name_plural = _("knowledge bases")
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="knowledge_base_unique_name")]

    def __str__(self) -> str:
        return self.name


class DocumentStatus(models.TextChoices):
    PENDING = "pending", _("Waiting")
    PROCESSING = "processing", _("Processing")
    READY = "ready", _("Ready")
    FAILED = "failed", _("Failed")


class IngestStage(models.TextChoices):
    QUEUED = "queued", _("Queued")
    PARSE = "parse", _("Reading the file")
    CHUNK = "chunk", _("Cutting into chunks")
    EMBED = "embed", _("Computing embeddings")
    INDEX = "index", _("Indexing")
    DONE = "done", _("Done")


# Bytes of a stored file's name: file systems refuse a name over 255 bytes, and a Chinese character takes 3. The
# document keeps its whole name (Document.name); only the file on disk is shortened.
STORED_NAME_BYTES = 120


def stored_filename(filename: str, max_bytes: int = STORED_NAME_BYTES) -> str:
    """`filename` cut to at most `max_bytes` of UTF-8 at a character boundary, its extension kept."""
    stem, dot, extension = filename.rpartition(".")
    if not dot or not stem:
        stem, extension = filename, ""
    extension = extension[:10]
    budget = max_bytes - (len(extension.encode()) + 1 if extension else 0)
    stem = stem.encode()[:budget].decode("utf-8", "ignore").strip() or "file"
    return f"{stem}.{extension}" if extension else stem


def document_upload_to(document: Document, filename: str) -> str:
    return f"knowledge/{document.tenant_id}/{document.knowledge_base_id}/{uuid.uuid4().hex}/{stored_filename(filename)}"


class Document(TenantOwned):
    knowledge_base = models.ForeignKey(
        KnowledgeBase, on_delete=models.CASCADE, related_name="documents", verbose_name=_("knowledge base")
    )
    name = models.CharField(_("name"), max_length=255)
    file = models.FileField(_("file"), upload_to=document_upload_to, max_length=500)
    file_type = models.CharField(_("file type"), max_length=10)  # txt md html pdf docx csv json
    size = models.PositiveBigIntegerField(_("size (bytes)"), default=0)
    sha256 = models.CharField(_("SHA-256"), max_length=64, blank=True)
    status = models.CharField(
        _("status"), max_length=20, choices=DocumentStatus.choices, default=DocumentStatus.PENDING, db_index=True
    )
    stage = models.CharField(_("stage"), max_length=20, choices=IngestStage.choices, default=IngestStage.QUEUED)
    progress = models.PositiveSmallIntegerField(_("progress (%)"), default=0)
    error = models.TextField(_("error"), blank=True)
    chunk_count = models.PositiveIntegerField(_("chunks"), default=0)
    # What the chunks were embedded with ("local:all-MiniLM-L6-v2:384"); a different embedder means re-ingest.
    embedded_with = models.CharField(_("embedded with"), max_length=300, blank=True)
    ingested_at = models.DateTimeField(_("ingested"), null=True, blank=True)
    created_at = models.DateTimeField(_("uploaded"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        verbose_name = _("document")
        verbose_name_plural = _("documents")
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name


class Chunk(TenantOwned):
    knowledge_base = models.ForeignKey(
        KnowledgeBase, on_delete=models.CASCADE, related_name="chunks", verbose_name=_("knowledge base")
    )
    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks", verbose_name=_("document"))
    position = models.PositiveIntegerField(_("position"))  # 0-based order within the document
    text = models.TextField(_("text"))
    token_count = models.PositiveIntegerField(_("tokens"), default=0)
    embedding = EmbeddingField(_("embedding"), null=True, blank=True)
    embedding_model = models.CharField(_("embedding model"), max_length=200, blank=True)
    embedding_dim = models.PositiveIntegerField(_("embedding dimension"), default=0, db_index=True)
    # Keyword index data: the chunk's segmented terms (jieba for Chinese, words for English), space-separated.
    terms = models.TextField(_("terms"), blank=True)
    metadata = models.JSONField(_("metadata"), default=dict, blank=True)  # e.g. a JSON record's key, a CSV row

    class Meta:
        verbose_name = _("chunk")
        verbose_name_plural = _("chunks")
        ordering = ["document_id", "position"]
        indexes = [models.Index(fields=["knowledge_base", "id"], name="knowledge_chunk_kb_id")]
        constraints = [models.UniqueConstraint(fields=["document", "position"], name="knowledge_chunk_unique_position")]

    def __str__(self) -> str:
        return f"{self.document_id}#{self.position}"


class IngestShare(TenantOwned):
    """What a document's ingestion on Celery workers has done so far, kept between its tasks until the last one stores
    the chunks (knowledge.ingest.ingest_share): share 0 holds the chunks as cut (JSON), each later share the embeddings
    of the next texts in embedding order (float32 .npy). Deleting the document deletes them."""

    document = models.ForeignKey(
        Document, on_delete=models.CASCADE, related_name="ingest_shares", verbose_name=_("document")
    )
    run = models.CharField(_("run"), max_length=32)  # one ingestion of one version of the file
    number = models.PositiveIntegerField(_("number"))
    file = models.CharField(_("file"), max_length=500)  # the file the run ingests: a replaced file supersedes the run
    start = models.PositiveIntegerField(_("first text"), default=0)
    count = models.PositiveIntegerField(_("texts"), default=0)
    data = models.BinaryField(_("data"))
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        verbose_name = _("ingestion share")
        verbose_name_plural = _("ingestion shares")
        constraints = [models.UniqueConstraint(fields=["run", "number"], name="knowledge_ingest_share_unique")]

    def __str__(self) -> str:
        return f"{self.document_id} {self.run} #{self.number}"
