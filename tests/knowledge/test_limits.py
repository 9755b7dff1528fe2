"""What one document may cost (the probe's finding: a 136 KB .docx unpacked to 50 MB of text and 99,999 chunks,
embedded for more than 15 minutes while another tenant's 38-byte upload waited): limits per document with the reason
on its row, deletion stopping an ingestion, and tenants ingested side by side in the embedded default."""

from __future__ import annotations

import time

import numpy as np
import pytest

from knowledge.ingest import EMBED_BATCH, ingest_in_scope, pipeline
from knowledge.models import Document
from knowledge.services import document_add, knowledge_base_create
from tenants.scope import tenant_scope
from tests.factories import refreshed
from tests.knowledge.factories import make_docx, make_pdf

pytestmark = pytest.mark.django_db


def _ingested(kb, name: str, content: bytes) -> Document:
    with tenant_scope(kb.tenant):
        document = document_add(knowledge_base=kb, name=name, content=content, queue=False)
        ingest_in_scope(document_id=document.pk)
        refreshed(document)
    return document


def test_a_docx_that_unpacks_too_large_fails_before_it_is_unpacked(kb, settings):
    settings.KNOWLEDGE_MAX_UNPACKED_BYTES = 500_000
    bomb = make_docx(heading="Report", paragraphs=["逆变器巡检。" * 100_000])  # compresses to a few KB
    assert len(bomb) < 100_000
    document = _ingested(kb, "report.docx", bomb)
    assert document.status == "failed" and "KNOWLEDGE_MAX_UNPACKED_BYTES" in document.error
    assert "bytes once unpacked" in document.error and document.chunk_count == 0


def test_too_many_pages_characters_or_chunks_fail_with_the_reason(kb, settings):
    settings.KNOWLEDGE_MAX_PAGES = 2
    pdf = _ingested(kb, "three.pdf", make_pdf(["Page one.", "Page two.", "Page three."]))
    assert pdf.status == "failed" and "3 pages" in pdf.error and "KNOWLEDGE_MAX_PAGES" in pdf.error
    settings.KNOWLEDGE_MAX_CHARACTERS = 1_000
    long_text = _ingested(kb, "long.txt", ("Solar panels face south. " * 100).encode())
    assert long_text.status == "failed" and "2,500 characters" in long_text.error
    settings.KNOWLEDGE_MAX_CHARACTERS = 1_000_000
    settings.KNOWLEDGE_MAX_CHUNKS = 2
    many = _ingested(kb, "many.txt", ("Solar panels face south and make power all day long. " * 40).encode())
    assert many.status == "failed" and "KNOWLEDGE_MAX_CHUNKS" in many.error


class CountingEmbedder:
    kind, model, dimension, english_only = "test", "counting", 4, False

    def __init__(self, on_batch=None, delay: float = 0.0) -> None:
        self.batches = 0
        self.on_batch = on_batch
        self.delay = delay

    def signature(self) -> str:
        return "test:counting"

    def embed(self, texts: list[str]) -> np.ndarray:
        self.batches += 1
        if self.on_batch is not None:
            self.on_batch(self.batches)
        time.sleep(self.delay)
        return np.ones((len(texts), 4), dtype=np.float32)


def test_deleting_a_document_stops_its_ingestion(kb, monkeypatch):
    with tenant_scope(kb.tenant):
        document = document_add(knowledge_base=kb, name="big.txt", queue=False,
                                content=("Panels. " * 30 + "\n\n").encode() * (EMBED_BATCH * 3))  # fmt: skip

    def delete_during_the_first_batch(batch: int) -> None:
        if batch == 1:
            Document.objects.filter(pk=document.pk).delete()

    embedder = CountingEmbedder(on_batch=delete_during_the_first_batch)
    monkeypatch.setattr(pipeline, "embedder_for", lambda knowledge_base: embedder)
    with tenant_scope(kb.tenant):
        assert ingest_in_scope(document_id=document.pk) == "gone"
    assert embedder.batches == 1  # not the three or more the document needed


@pytest.mark.django_db(transaction=True)
def test_another_tenants_small_upload_does_not_wait_for_a_big_one(tenant, other_tenant, settings, monkeypatch):
    settings.KNOWLEDGE_INGEST_IN_THREAD = True
    slow = CountingEmbedder(delay=0.3)  # every batch of every document takes 0.3 s
    monkeypatch.setattr(pipeline, "embedder_for", lambda knowledge_base: slow)
    with tenant_scope(tenant):
        big_kb = knowledge_base_create(tenant=tenant, name="Archive", chunk_size=60, chunk_overlap=10)
        big = document_add(knowledge_base=big_kb, name="archive.txt",
                           content=("Old report. " * 20 + "\n\n").encode() * (EMBED_BATCH * 8))  # fmt: skip
    time.sleep(0.2)  # the big one has started
    with tenant_scope(other_tenant):
        small_kb = knowledge_base_create(tenant=other_tenant, name="Menu")
        small = document_add(knowledge_base=small_kb, name="menu.txt", content=b"Baozi, 3 yuan.")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        refreshed(small)
        if small.status == "ready":
            break
        time.sleep(0.05)
    refreshed(big)
    assert small.status == "ready" and big.status == "processing"
    with tenant_scope(tenant):
        Document.objects.filter(pk=big.pk).delete()  # and it stops at its next batch
