"""Without a Celery worker (the embedded default), an upload answers at once and a background thread of the
process ingests it, so the page can show the progress as it would with a worker."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from django.db import transaction

from knowledge.ingest import pipeline
from knowledge.models import Chunk, Document
from knowledge.services import document_add, knowledge_base_create
from tenants.scope import tenant_scope

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_upload_is_ingested_on_a_background_thread(tenant, settings):
    settings.KNOWLEDGE_INGEST_IN_THREAD = True
    with tenant_scope(tenant):
        knowledge_base = knowledge_base_create(tenant=tenant, name="Notes")
        document = document_add(knowledge_base=knowledge_base, name="notes.txt", content=b"Solar panels face south.")
        # The service returned before ingestion: the row is still waiting or just started.
        assert Document.objects.get(pk=document.pk).status in {"pending", "processing"}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            document.refresh_from_db()
            if document.status not in {"pending", "processing"}:
                break
            time.sleep(0.1)
    assert document.status == "ready", document.error
    assert document.progress == 100 and document.chunk_count == 1


class _PausingEmbedder:
    """Holds the ingestion inside its storing transaction (chunks written, documents read) until `release` is set:
    `signature()` is called there, for the documents' row."""

    kind, model, dimension, english_only = "test", "pausing", 4, False

    def __init__(self) -> None:
        self.inside, self.release = threading.Event(), threading.Event()

    def signature(self) -> str:
        if transaction.get_connection().in_atomic_block:
            self.inside.set()
            self.release.wait(timeout=30)
        return "test:pausing:4"

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.ones((len(texts), self.dimension), dtype=np.float32)


def test_the_page_reads_and_uploads_while_the_background_thread_stores_its_chunks(tenant, settings, monkeypatch):
    """On the embedded SQLite database a read during the thread's write transaction goes on, and a write waits for
    it, instead of failing with "database table is locked" (the shared-cache in-memory test database, as it was) or
    "database is locked" (a file without a busy wait)."""
    settings.KNOWLEDGE_INGEST_IN_THREAD = True
    embedder = _PausingEmbedder()
    monkeypatch.setattr(pipeline, "embedder_for", lambda knowledge_base: embedder)
    with tenant_scope(tenant):
        knowledge_base = knowledge_base_create(tenant=tenant, name="Notes")
        first = document_add(knowledge_base=knowledge_base, name="first.txt", content=b"Solar panels face south.")
        try:
            assert embedder.inside.wait(timeout=60), "the background ingestion never reached its storing transaction"
            # What the knowledge base's page reads meanwhile: the documents' progress and the chunks.
            assert Document.objects.get(pk=first.pk).status == "processing"
            assert not Chunk.objects.filter(knowledge_base=knowledge_base).exists()
            # An upload meanwhile writes the same table: it waits for the thread's transaction.
            threading.Timer(0.3, embedder.release.set).start()
            second = document_add(knowledge_base=knowledge_base, name="second.txt", content=b"Wind.", queue=False)
        finally:
            embedder.release.set()
        deadline = time.monotonic() + 60
        while Document.objects.filter(pk=first.pk, status__in=["pending", "processing"]).exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert Document.objects.get(pk=first.pk).status == "ready"
        assert Chunk.objects.filter(document_id=first.pk).count() == 1
        assert Document.objects.get(pk=second.pk).status == "pending"
