"""pgvector (K4): the HNSW backend agrees with the exact search, uses its partial index, and keeps tenants apart.
Run against scripts/pgvector-server (CI: REQUIRE_PGVECTOR=1, where a database without the extension fails)."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connection

from knowledge import retrieval, vectorstore
from knowledge.embedders import local_embedder
from knowledge.models import KnowledgeBase
from knowledge.retrieval import search, search_many
from tenants.scope import tenant_scope
from tests.knowledge.test_retrieval import CHINESE, ENGLISH, add_document

pytestmark = pytest.mark.pgvector

QUERIES = [
    "famous landmark in the French capital",
    "how plants make sugar",
    "interest rates and the stock market",
    "baking bread with wild yeast",
    "a language for readable programs",
    "机器学习",
]


@pytest.fixture
def kb(pgvector_db, in_tenant):
    knowledge_base = KnowledgeBase.objects.create(name="facts", embedder="local")
    add_document(knowledge_base, "english.txt", ENGLISH)
    add_document(knowledge_base, "中文.txt", CHINESE)
    return knowledge_base


def test_backend_is_pgvector(kb):
    assert vectorstore.backend_name() == "pgvector"


def test_pgvector_and_exact_return_the_same_chunks(kb):
    model = local_embedder().model
    for query in QUERIES:
        vector = local_embedder().embed([query])[0]
        approximate = vectorstore.PgvectorBackend().search(kb, model=model, vector=vector, k=5)
        exact = vectorstore.ExactBackend().search(kb, model=model, vector=vector, k=5)
        assert [chunk_id for chunk_id, _ in approximate] == [chunk_id for chunk_id, _ in exact], query
        np.testing.assert_allclose([s for _, s in approximate], [s for _, s in exact], atol=1e-5)


def test_search_gives_the_same_top_chunks_on_both_backends(kb, monkeypatch):
    on_pgvector = {
        (q, mode): [h.chunk_id for h in search(kb, q, mode=mode)] for q in QUERIES for mode in retrieval.MODES
    }
    exact = vectorstore.ExactBackend()
    monkeypatch.setattr(vectorstore, "backend", lambda: exact)
    on_exact = {(q, mode): [h.chunk_id for h in search(kb, q, mode=mode)] for q in QUERIES for mode in retrieval.MODES}
    assert on_pgvector == on_exact


def test_the_query_can_use_the_partial_hnsw_index(kb):
    vectorstore.ensure_index(384)  # idempotent
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [vectorstore.index_name(384)])
        (definition,) = cursor.fetchone()
    assert "hnsw" in definition and "vector_cosine_ops" in definition and "embedding_dim = 384" in definition
    vector = local_embedder().embed(["Eiffel Tower"])[0]
    queryset = vectorstore.PgvectorBackend()._queryset(kb, local_embedder().model, vector, 5)
    with connection.cursor() as cursor:
        # Few rows: the planner would rather scan; forbid that to see that the index matches the query's form.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute("DROP INDEX knowledge_chunk_kb_id")
        plan = queryset.explain()
    assert vectorstore.index_name(384) in plan
    assert "tenant_id" in str(queryset.query)


def test_filtered_hnsw_scan_still_returns_k_chunks(kb, in_tenant):
    """A small knowledge base beside a big one: the iterative index scan goes on until k rows pass the filter."""
    big = KnowledgeBase.objects.create(name="big", embedder="local")
    add_document(big, "many.txt", [f"Report number {i} about shipping containers and ports." for i in range(60)])
    vector = local_embedder().embed(["Report about shipping containers"])[0]  # close to the big base, not ours
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute("DROP INDEX knowledge_chunk_kb_id")
        hits = vectorstore.PgvectorBackend().search(kb, model=local_embedder().model, vector=vector, k=9)
    assert len(hits) == len(ENGLISH) + len(CHINESE)


def test_another_tenants_knowledge_base_is_invisible_on_pgvector(kb, tenant, other_tenant):
    with tenant_scope(other_tenant):
        theirs = KnowledgeBase.objects.create(name="secret", embedder="local")
        add_document(theirs, "secret.txt", ["The Eiffel Tower's secret launch code is swordfish."])
        assert search(theirs, "Eiffel Tower secret code", mode="vector", top_k=1)
    with tenant_scope(tenant):
        for mode in retrieval.MODES:
            assert search(theirs, "Eiffel Tower secret code", mode=mode) == []
            hits = search_many([kb, theirs], "Eiffel Tower secret code", mode=mode, top_k=20)
            assert hits and {hit.knowledge_base_id for hit in hits} == {kb.pk}
        # Even asked directly, the backend's query is tenant-scoped.
        vector = local_embedder().embed(["Eiffel Tower secret code"])[0]
        backend = vectorstore.PgvectorBackend()
        assert backend.search(theirs, model=local_embedder().model, vector=vector, k=5) == []
        their_chunk = list(theirs.chunks.model._base_manager.filter(knowledge_base=theirs).values_list("id", flat=True))
        assert backend.similarities(theirs, model=local_embedder().model, vector=vector, chunk_ids=their_chunk) == {}
