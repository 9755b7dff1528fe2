"""The exact vector backend (SQLite, PostgreSQL without pgvector): cosine ranking, model filter, revision cache."""

from __future__ import annotations

import numpy as np
import pytest
from django.db.models import F

from knowledge import vectorstore
from knowledge.models import Chunk, Document, KnowledgeBase


def _unit(*values: float) -> tuple[float, ...]:
    vector = np.asarray(values, dtype=np.float32)
    return tuple((vector / np.linalg.norm(vector)).tolist())


def _chunk(document: Document, position: int, vector: tuple[float, ...], *, text: str = "new", model: str = "m"):
    return Chunk.objects.create(
        knowledge_base_id=document.knowledge_base_id,
        document=document,
        position=position,
        text=text,
        embedding=vector,
        embedding_model=model,
        embedding_dim=len(vector),
    )


@pytest.fixture
def kb(in_tenant):
    knowledge_base = KnowledgeBase.objects.create(name="vectors")
    document = Document.objects.create(knowledge_base=knowledge_base, name="d.txt", file="d.txt", file_type="txt")
    vectors = [_unit(1, 0, 0), _unit(1, 1, 0), _unit(0, 1, 0), _unit(0, 0, 1)]
    for position, vector in enumerate(vectors):
        _chunk(document, position, vector, text=f"chunk {position}")
    _chunk(document, 9, _unit(1, 0, 0), text="other model", model="other")
    return knowledge_base


def _positions(knowledge_base, hits):
    by_id = dict(Chunk.objects.filter(knowledge_base=knowledge_base).values_list("id", "position"))
    return [by_id[chunk_id] for chunk_id, _ in hits]


def test_exact_backend_ranks_by_cosine_and_filters_the_model(kb):
    backend = vectorstore.ExactBackend()
    hits = backend.search(kb, model="m", vector=np.asarray(_unit(1, 0.1, 0), dtype=np.float32), k=3)
    assert _positions(kb, hits) == [0, 1, 2]
    assert hits[0][1] == pytest.approx(float(np.dot(_unit(1, 0.1, 0), _unit(1, 0, 0))), abs=1e-5)
    everything = backend.search(kb, model="m", vector=np.asarray(_unit(1, 0, 0), dtype=np.float32), k=50)
    assert len(everything) == 4  # the "other" model's chunk is not compared


def test_similarities_for_given_chunks(kb):
    backend = vectorstore.ExactBackend()
    ids = dict(Chunk.objects.filter(knowledge_base=kb).values_list("position", "id"))
    scores = backend.similarities(
        kb, model="m", vector=np.asarray(_unit(0, 0, 1), dtype=np.float32), chunk_ids=[ids[3], ids[0], ids[9]]
    )
    assert scores[ids[3]] == pytest.approx(1.0, abs=1e-5)
    assert scores[ids[0]] == pytest.approx(0.0, abs=1e-5)
    assert ids[9] not in scores  # another model


def test_exact_matrix_is_kept_until_the_revision_moves(kb, django_assert_num_queries):
    backend = vectorstore.ExactBackend()
    vector = np.asarray(_unit(0, 0, 1), dtype=np.float32)
    backend.search(kb, model="m", vector=vector, k=1)
    with django_assert_num_queries(0):
        backend.search(kb, model="m", vector=vector, k=1)
    document = Document.objects.get(knowledge_base=kb)
    _chunk(document, 5, _unit(0, 0.1, 1))
    assert len(backend.search(kb, model="m", vector=vector, k=10)) == 4  # same revision: the cached matrix
    KnowledgeBase.objects.filter(pk=kb.pk).update(revision=F("revision") + 1)
    kb.refresh_from_db()
    assert len(backend.search(kb, model="m", vector=vector, k=10)) == 5


def test_a_change_reads_only_the_new_vectors_and_drops_the_deleted(kb, django_assert_num_queries):
    backend = vectorstore.ExactBackend()
    vector = np.asarray(_unit(0, 0.1, 1), dtype=np.float32)
    backend.search(kb, model="m", vector=vector, k=10)
    ids = dict(Chunk.objects.filter(knowledge_base=kb).values_list("position", "id"))
    new = _chunk(Document.objects.get(knowledge_base=kb), 5, _unit(0, 0.1, 1))
    Chunk.objects.filter(pk=ids[3]).delete()
    KnowledgeBase.objects.filter(pk=kb.pk).update(revision=F("revision") + 1)
    kb.refresh_from_db()
    with django_assert_num_queries(2):  # the ids, then the one new vector (not all of them again)
        hits = backend.search(kb, model="m", vector=vector, k=10)
    assert hits[0] == (new.pk, pytest.approx(1.0, abs=1e-5))
    assert sorted(chunk_id for chunk_id, _ in hits) == sorted([ids[0], ids[1], ids[2], new.pk])
    rebuilt = vectorstore.ExactBackend().search(kb, model="m", vector=vector, k=10)
    assert [chunk_id for chunk_id, _ in hits] == [chunk_id for chunk_id, _ in rebuilt]
    assert [score for _, score in hits] == pytest.approx([score for _, score in rebuilt])
    assert backend.similarities(kb, model="m", vector=vector, chunk_ids=[ids[3], new.pk]).keys() == {new.pk}


def test_backend_name_follows_the_column(kb):
    """The admin shows which backend is active: the exact one unless the embedding column is pgvector's."""
    expected = "pgvector" if vectorstore.uses_pgvector() else "exact"
    assert vectorstore.backend_name() == expected
    vectorstore.ensure_index(3)  # a no-op without pgvector, creates the 3-dimension index with it
    vector = np.asarray(_unit(0, 0, 1), dtype=np.float32)
    assert len(vectorstore.backend().search(kb, model="m", vector=vector, k=10)) == 4
