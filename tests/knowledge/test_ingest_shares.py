"""Ingestion in shares (what a Celery worker does, knowledge.ingest.ingest_share): the same chunks and vectors as at
once, nothing kept once done, a second delivery of a share harmless, a deleted or replaced document stopping its run.
The worker itself: tests/knowledge/test_ingest_worker.py."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from knowledge.ingest import CONTINUE, DUPLICATE, EMBED_BATCH, ingest_in_scope, ingest_share, pipeline
from knowledge.models import Chunk, Document, IngestShare
from knowledge.services import document_add, document_replace
from tenants.scope import tenant_scope

pytestmark = pytest.mark.django_db

TEXT = b"".join(f"Inverter {n} reads {n * 7} kWh on panel row {n % 5}.\n\n".encode() * 3 for n in range(300))


class TextEmbedder:
    """A vector from each text's hash: the same text gives the same vector in any batch."""

    kind, model, dimension, english_only = "test", "hashed", 8, False

    def __init__(self) -> None:
        self.batches = 0

    def signature(self) -> str:
        return "test:hashed"

    def embed(self, texts: list[str]) -> np.ndarray:
        self.batches += 1
        return np.array([list(hashlib.sha256(t.encode()).digest()[:8]) for t in texts], dtype=np.float32)


@pytest.fixture
def embedder(monkeypatch):
    embedder = TextEmbedder()
    monkeypatch.setattr(pipeline, "embedder_for", lambda knowledge_base: embedder)
    return embedder


def _shares(document_id: int, run: str = "") -> list[str]:
    """Run every share (one batch each) until the document's ingestion ends; the outcomes."""
    outcomes = []
    while True:
        outcome, run = ingest_share(document_id=document_id, run=run, seconds=0)
        outcomes.append(outcome)
        if outcome != CONTINUE:
            return outcomes


def _chunks(document_id: int) -> list[tuple[int, str, list[float]]]:
    return [(c.position, c.text, list(np.asarray(c.embedding, dtype=np.float32)))
            for c in Chunk.objects.filter(document_id=document_id).order_by("position")]  # fmt: skip


def test_shares_store_what_one_ingestion_would(kb, embedder):
    with tenant_scope(kb.tenant):
        whole = document_add(knowledge_base=kb, name="whole.txt", content=TEXT, queue=False)
        shared = document_add(knowledge_base=kb, name="shared.txt", content=TEXT, queue=False)
        assert ingest_in_scope(document_id=whole.pk) == "ready"
        batches = embedder.batches
        assert batches >= 3

        outcomes = _shares(shared.pk)
        assert outcomes == [CONTINUE] * (batches - 1) + ["ready"]  # one batch per share, then the chunks stored
        assert embedder.batches == 2 * batches  # nothing embedded twice
        shared.refresh_from_db()
        whole.refresh_from_db()
        assert (shared.status, shared.progress, shared.chunk_count) == ("ready", 100, whole.chunk_count)
        assert _chunks(shared.pk) == _chunks(whole.pk)
        assert not IngestShare.objects.exists()


def test_a_share_delivered_again_goes_on_from_what_is_kept(kb, embedder):
    with tenant_scope(kb.tenant):
        document = document_add(knowledge_base=kb, name="notes.txt", content=TEXT, queue=False)
        outcome, run = ingest_share(document_id=document.pk, seconds=0)
        assert outcome == CONTINUE and IngestShare.objects.filter(run=run).count() == 2  # the chunks, one batch
        # The worker died after it queued the next share but before the broker heard this one was done: both
        # deliveries go on from what is kept, neither embeds a batch twice, one stores the chunks.
        embedded = embedder.batches
        assert ingest_share(document_id=document.pk, run=run, seconds=0)[0] == CONTINUE
        outcomes = _shares(document.pk, run)
        assert outcomes[-1] == "ready" and ingest_share(document_id=document.pk, run=run, seconds=0) == (DUPLICATE, "")
        document.refresh_from_db()
        assert embedder.batches - embedded == 1 + len(outcomes)  # one batch per delivery
        assert Chunk.objects.filter(document=document).count() == document.chunk_count
        assert not IngestShare.objects.exists()


def test_a_deleted_or_replaced_document_stops_its_run_and_leaves_nothing(kb, embedder):
    with tenant_scope(kb.tenant):
        deleted = document_add(knowledge_base=kb, name="old.txt", content=TEXT, queue=False)
        _outcome, run = ingest_share(document_id=deleted.pk, seconds=0)
        Document.objects.filter(pk=deleted.pk).delete()
        assert ingest_share(document_id=deleted.pk, run=run, seconds=0) == ("gone", "")
        assert not IngestShare.objects.exists()

        replaced = document_add(knowledge_base=kb, name="plan.txt", content=TEXT, queue=False)
        _outcome, run = ingest_share(document_id=replaced.pk, seconds=0)
        document_replace(document=replaced, content=TEXT + b"A new paragraph.\n", queue=False)
        assert ingest_share(document_id=replaced.pk, run=run, seconds=0) == ("superseded", "")
        assert not IngestShare.objects.exists() and not Chunk.objects.filter(document=replaced).exists()


def test_a_failing_share_marks_the_document_and_leaves_nothing(kb, embedder, monkeypatch):
    with tenant_scope(kb.tenant):
        document = document_add(knowledge_base=kb, name="notes.txt", content=TEXT, queue=False)
        _outcome, run = ingest_share(document_id=document.pk, seconds=0)
        monkeypatch.setattr(embedder, "embed", lambda texts: np.full((len(texts), 8), np.nan, dtype=np.float32))
        assert ingest_share(document_id=document.pk, run=run, seconds=0) == ("failed", "")
        document.refresh_from_db()
        assert document.status == "failed" and "invalid numbers" in document.error
        assert not IngestShare.objects.exists()


def test_shares_are_bounded_by_time_not_by_document_size(kb, embedder):
    with tenant_scope(kb.tenant):
        document = document_add(knowledge_base=kb, name="notes.txt", content=TEXT, queue=False)
        outcome, run = ingest_share(document_id=document.pk, seconds=3600)  # time enough for the whole document
        document.refresh_from_db()
        assert (outcome, run) == ("ready", "") and embedder.batches == -(-document.chunk_count // EMBED_BATCH)
        assert not IngestShare.objects.exists()
