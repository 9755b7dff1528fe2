"""Small documents queued together are ingested together (knowledge.ingest: `claim_batch`, `Batch`): shared embedding
calls, one bulk insert, their rows marked in a few statements and one revision bump, whatever their number; each keeps
its own outcome (a failing one fails alone with its reason, a deleted or replaced one is left out alone), their own
tasks find them taken at the cost of one query, and on a worker the batch goes in shares like one document."""

from __future__ import annotations

import hashlib
import time

import numpy as np
import pytest

from knowledge import vectorstore
from knowledge.embedders import EmbedderError
from knowledge.ingest import (
    CONTINUE,
    TAKEN,
    claim,
    ingest_in_scope,
    ingest_next_share,
    ingest_queued_in_scope,
    pipeline,
    progress,
)
from knowledge.models import Chunk, Document, IngestShare, KnowledgeBase
from knowledge.services import document_add, document_replace
from knowledge.tasks import ingest_document
from tenants.scope import tenant_scope
from tests.knowledge.factories import make_pdf

pytestmark = pytest.mark.django_db


def _note(n: int) -> bytes:
    return f"Note {n}: inverter {n} on roof {n % 7} reads {n * 13} kWh this month.".encode()


class HashedEmbedder:
    """A vector from each text's hash (the same text gives the same vector in any batch); `poison` texts fail, as an
    endpoint refusing one input would; `on_call` runs before each call."""

    kind, model, dimension, english_only = "test", "hashed", 8, False

    def __init__(self, poison: str = "", on_call=None) -> None:
        self.calls: list[int] = []
        self.poison = poison
        self.on_call = on_call

    def signature(self) -> str:
        return "test:hashed:8"

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls.append(len(texts))
        if self.on_call is not None:
            self.on_call(len(self.calls))
        if self.poison and any(self.poison in text for text in texts):
            raise EmbedderError("The embeddings endpoint refused an input.")
        return np.array([list(hashlib.sha256(t.encode()).digest()[:8]) for t in texts], dtype=np.float32) + 1


@pytest.fixture
def embedder(monkeypatch):
    embedder = HashedEmbedder()
    monkeypatch.setattr(pipeline, "embedder_for", lambda knowledge_base: embedder)
    return embedder


def _queue(kb: KnowledgeBase, count: int, start: int = 0) -> list[Document]:
    """`count` small documents waiting in `kb` (uploaded, their tasks not run)."""
    return [document_add(knowledge_base=kb, name=f"note-{n}.txt", content=_note(n), queue=False)
            for n in range(start, start + count)]  # fmt: skip


def _statuses(documents: list[Document]) -> dict[str, str]:
    rows = dict(Document.objects.filter(pk__in=[d.pk for d in documents]).values_list("name", "status"))
    return {d.name: rows.get(d.name, "deleted") for d in documents}


@pytest.mark.parametrize("count", [12, 60])
def test_a_batch_of_small_documents_costs_a_bounded_number_of_statements(
    kb, embedder, count, django_assert_max_num_queries
):
    with tenant_scope(kb.tenant):
        documents = _queue(kb, count)
        revision = KnowledgeBase.objects.get(pk=kb.pk).revision
        taken: list[int] = []
        vectorstore.uses_pgvector()  # the column's type is looked up once a process, not by every batch
        # The same bound for 12 documents and for 60 (on pgvector 19: the check whether the knowledge base has grown
        # large enough for an HNSW index of its own is one statement per batch).
        with django_assert_max_num_queries(19):
            assert ingest_queued_in_scope(document_id=documents[0].pk, taken=taken) == "ready"
        assert sorted(taken) == sorted(d.pk for d in documents[1:])
        assert set(_statuses(documents).values()) == {"ready"}
        assert KnowledgeBase.objects.get(pk=kb.pk).revision == revision + 1  # one bump for the whole batch
        assert sum(embedder.calls) == count and len(embedder.calls) == -(-count // pipeline.EMBED_BATCH)
        for document in Document.objects.filter(pk__in=[d.pk for d in documents]):
            assert (document.stage, document.progress, document.chunk_count) == ("done", 100, 1)
            assert document.embedded_with == "test:hashed:8" and document.ingested_at is not None

        # Their own tasks come later and find them done: one query each, no tenant lookup, nothing ingested.
        with django_assert_max_num_queries(1):
            assert ingest_document(kb.tenant_id, documents[5].pk) == TAKEN
        assert sum(embedder.calls) == count


def test_a_batch_stores_what_one_document_at_a_time_would(kb, embedder):
    with tenant_scope(kb.tenant):
        alone = [document_add(knowledge_base=kb, name=f"alone-{n}.txt", content=_note(n), queue=False)
                 for n in range(5)]  # fmt: skip
        for document in alone:
            assert ingest_in_scope(document_id=document.pk) == "ready"
        together = _queue(kb, 5)
        assert ingest_queued_in_scope(document_id=together[0].pk) == "ready"

        def stored(documents):
            return [
                [(c.position, c.text, c.terms, c.token_count, list(c.embedding))
                 for c in Chunk.objects.filter(document_id=d.pk).order_by("position")]
                for d in documents
            ]  # fmt: skip

        assert stored(together) == stored(alone)


def test_a_failing_document_fails_alone_with_its_reason(kb, monkeypatch):
    embedder = HashedEmbedder(poison="roof 3 ")  # note 3 (and 10, 17, ...): the endpoint refuses them
    monkeypatch.setattr(pipeline, "embedder_for", lambda knowledge_base: embedder)
    with tenant_scope(kb.tenant):
        documents = _queue(kb, 8)
        corrupt = document_add(knowledge_base=kb, name="scan.pdf", content=b"PK\x03\x04 no pdf", queue=False)
        report = document_add(knowledge_base=kb, name="report.pdf", content=make_pdf(["Ospreys dive."]), queue=False)
        assert ingest_queued_in_scope(document_id=documents[0].pk) == "ready"
        rows = {d.name: d for d in Document.objects.filter(knowledge_base=kb)}
        assert rows["note-3.txt"].status == "failed" and rows["note-3.txt"].stage == "embed"
        assert rows["note-3.txt"].error == "The embeddings endpoint refused an input."
        assert rows["scan.pdf"].status == "failed" and "not a PDF" in rows["scan.pdf"].error
        assert rows["scan.pdf"].stage == "parse"
        ready = [name for name, row in rows.items() if row.status == "ready"]
        assert sorted(ready) == sorted([f"note-{n}.txt" for n in range(8) if n != 3] + ["report.pdf"])
        assert not Chunk.objects.filter(document_id__in=[rows["note-3.txt"].pk, corrupt.pk]).exists()
        assert Chunk.objects.filter(document_id=report.pk).count() == 1
        assert all(row.error == "" for row in rows.values() if row.status == "ready")


def test_deleting_or_replacing_one_in_the_middle_of_a_batch_leaves_only_it_out(kb, monkeypatch):
    monkeypatch.setattr(pipeline, "EMBED_BATCH", 4)  # several embedding calls,
    monkeypatch.setattr(pipeline, "PROGRESS_SECONDS", 0)  # checked between them (not at most every second)
    monkeypatch.setattr(progress, "PROGRESS_SECONDS", 0)

    def meanwhile(call: int) -> None:
        if call == 1:
            Document.objects.filter(name="note-6.txt").delete()
            replaced = Document.objects.get(name="note-9.txt")
            document_replace(document=replaced, content=b"A new version of note 9.", queue=False)

    embedder = HashedEmbedder(on_call=meanwhile)
    monkeypatch.setattr(pipeline, "embedder_for", lambda knowledge_base: embedder)
    with tenant_scope(kb.tenant):
        documents = _queue(kb, 12)
        assert ingest_queued_in_scope(document_id=documents[0].pk) == "ready"
        statuses = _statuses(documents)
        assert statuses.pop("note-6.txt") == "deleted"
        assert statuses.pop("note-9.txt") == "pending"  # queued again with its new file: its own task does it
        assert set(statuses.values()) == {"ready"}
        assert not Chunk.objects.filter(document__name="note-9.txt").exists()
        assert Chunk.objects.filter(knowledge_base=kb).count() == 10
        assert sum(embedder.calls) < 12  # the two documents' texts were not embedded after they left

        # The replaced document's own task ingests its new file.
        assert ingest_document(kb.tenant_id, documents[9].pk) == "ready"
        assert Chunk.objects.get(document_id=documents[9].pk).text == "A new version of note 9."


def test_a_large_document_goes_alone_and_leaves_the_small_ones_queued(kb, embedder, monkeypatch):
    monkeypatch.setattr(claim, "SMALL_DOCUMENT_BYTES", 1000)
    with tenant_scope(kb.tenant):
        big = document_add(knowledge_base=kb, name="big.txt", content=b"Long report. " * 200, queue=False)
        small = _queue(kb, 3)
        taken: list[int] = []
        assert ingest_queued_in_scope(document_id=big.pk, taken=taken) == "ready" and taken == []
        assert set(_statuses(small).values()) == {"pending"}
        assert ingest_queued_in_scope(document_id=small[1].pk, taken=taken) == "ready"
        assert sorted(taken) == sorted([small[0].pk, small[2].pk])  # the queued ones before it too


def test_a_batch_in_shares_on_a_worker_survives_the_loss_of_its_first_document(kb, embedder, monkeypatch):
    monkeypatch.setattr(pipeline, "EMBED_BATCH", 3)
    with tenant_scope(kb.tenant):
        documents = _queue(kb, 10)
        result = ingest_next_share(document_id=documents[0].pk, seconds=0)  # one embedding call
        assert result.outcome == CONTINUE and result.document_id == documents[0].pk
        assert sorted(result.documents) == sorted(d.pk for d in documents)
        assert set(_statuses(documents).values()) == {"processing"}
        # Their own tasks, meanwhile, find them taken (and do not start them again).
        assert ingest_document(kb.tenant_id, documents[4].pk) == TAKEN

        Document.objects.filter(pk=documents[0].pk).delete()  # its shares go with it
        assert not IngestShare.objects.filter(run=result.run).exists()
        outcomes = []
        while result.outcome == CONTINUE:
            result = ingest_next_share(
                document_id=result.document_id, run=result.run, seconds=0, documents=result.documents
            )
            outcomes.append(result.outcome)
        assert outcomes[0] == CONTINUE and outcomes[-1] in {"gone", "ready"}
        statuses = _statuses(documents)
        assert statuses.pop(documents[0].name) == "deleted" and set(statuses.values()) == {"ready"}
        assert Chunk.objects.filter(knowledge_base=kb).count() == 9
        assert not IngestShare.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_embedded_defaults_line_runs_one_batch_for_an_upload_of_many_files(tenant, settings, monkeypatch):
    from django.db import transaction

    from knowledge import tasks
    from knowledge.services import knowledge_base_create

    settings.KNOWLEDGE_INGEST_IN_THREAD = True
    embedder = HashedEmbedder()
    monkeypatch.setattr(pipeline, "embedder_for", lambda knowledge_base: embedder)
    outcomes: list[str] = []
    real = tasks.ingest_queued

    def recording(tenant_id: int, document_id: int):
        outcome, taken = real(tenant_id, document_id)
        outcomes.append(outcome)
        return outcome, taken

    monkeypatch.setattr(tasks, "ingest_queued", recording)
    with tenant_scope(tenant):
        kb = knowledge_base_create(tenant=tenant, name="Notes")
        with transaction.atomic():  # the page uploads several files in one request
            documents = [document_add(knowledge_base=kb, name=f"note-{n}.txt", content=_note(n)) for n in range(8)]
        deadline = time.monotonic() + 60
        while Document.objects.filter(knowledge_base=kb, status__in=["pending", "processing"]).exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert set(_statuses(documents).values()) == {"ready"}
    # The turn's outcome is recorded when its call returns, a moment after it marked the documents ready (on
    # pgvector it then checks whether the knowledge base needs its own index): wait for that too.
    while not [outcome for outcome in outcomes if outcome != TAKEN]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # One turn did the work; the others were dropped from the line (or, booked late, found their document taken).
    assert [outcome for outcome in outcomes if outcome != TAKEN] == ["ready"]
    assert sum(embedder.calls) == 8
