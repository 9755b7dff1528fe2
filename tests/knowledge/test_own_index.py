"""A large knowledge base's own HNSW index on pgvector (issue 15): built once the knowledge base crosses
KNOWLEDGE_OWN_INDEX_MIN_CHUNKS, used by its queries and by no other knowledge base's, the same results as the shared
index, dropped with the knowledge base, and an invalid leftover of a failed build replaced."""

from __future__ import annotations

import io

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from knowledge import retrieval, vectorstore
from knowledge.embedders import local_embedder
from knowledge.models import KnowledgeBase
from knowledge.retrieval import search
from knowledge.services import document_add, knowledge_base_create, knowledge_base_delete
from tenants.scope import tenant_scope
from tests.knowledge.test_retrieval import CHINESE, ENGLISH, add_document

QUERIES = ["famous landmark in the French capital", "how plants make sugar", "baking bread with wild yeast", "高铁"]
MORE = [
    "Ospreys dive feet first to catch fish near the surface of lakes and rivers.",
    "The violin has four strings tuned in fifths and is played with a bow.",
    "Glaciers carve U-shaped valleys as they slowly move downhill under their own weight.",
]


def _plan(knowledge_base: KnowledgeBase, text: str) -> str:
    """The vector query's plan, with what the planner would rather do on a handful of rows (scan them all, or read
    them by another index and sort them) ruled out: an HNSW index, if one matches."""
    vector = local_embedder().embed([text])[0]
    with transaction.atomic(), connection.cursor() as cursor:
        for kind in ("seqscan", "bitmapscan", "sort"):
            cursor.execute(f"SET LOCAL enable_{kind} = off")
        plan = vectorstore.PgvectorBackend().explain(knowledge_base, model=local_embedder().model, vector=vector, k=5)
        transaction.set_rollback(True)  # the settings end with the savepoint
    return plan


def _ids(knowledge_base: KnowledgeBase) -> dict[tuple[str, str], list[int]]:
    retrieval.clear_caches()
    return {
        (query, mode): [hit.chunk_id for hit in search(knowledge_base, query, mode=mode, top_k=5)]
        for query in QUERIES
        for mode in ("vector", "hybrid")
    }


@pytest.fixture
def threshold(settings):
    settings.KNOWLEDGE_OWN_INDEX_MIN_CHUNKS = len(ENGLISH) + len(CHINESE) + 1
    return settings.KNOWLEDGE_OWN_INDEX_MIN_CHUNKS


@pytest.fixture
def big(pgvector_db, in_tenant, threshold):
    """A knowledge base just below the threshold (one more chunk crosses it)."""
    knowledge_base = KnowledgeBase.objects.create(name="big", embedder="local")
    add_document(knowledge_base, "english.txt", ENGLISH)
    add_document(knowledge_base, "中文.txt", CHINESE)
    return knowledge_base


@pytest.mark.pgvector
def test_ingestion_builds_the_index_once_the_knowledge_base_crosses_the_threshold(big, ingest):
    name = vectorstore.own_index_name(384, big.pk)
    assert not vectorstore.needs_own_index(big.pk, 384)
    assert name not in vectorstore.own_indexes()
    with ingest():
        document_add(knowledge_base=big, name="birds.txt", content=" ".join(MORE).encode())
    assert big.chunks.filter(document__name="birds.txt").exists()
    assert vectorstore.own_indexes() == {name: (384, big.pk)}
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [name])
        (definition,) = cursor.fetchone()
    assert "hnsw" in definition and "vector_cosine_ops" in definition and "vector(384)" in definition
    assert "embedding_dim = 384" in definition and f"knowledge_base_id = {big.pk}" in definition
    assert not vectorstore.needs_own_index(big.pk, 384)  # it exists
    assert vectorstore.ensure_own_index(big.pk, 384) is False  # nothing more to build


@pytest.mark.pgvector
def test_a_small_knowledge_base_gets_no_index_of_its_own(big, ingest):
    small = knowledge_base_create(tenant=big.tenant, name="small", embedder="local")
    with ingest():
        document_add(knowledge_base=small, name="birds.txt", content=" ".join(MORE).encode())
    assert vectorstore.own_indexes() == {}
    assert vectorstore.ensure_own_index(small.pk, 384) is False


@pytest.mark.pgvector
def test_the_knowledge_bases_query_uses_its_index_and_another_knowledge_base_does_not(big, tenant, other_tenant):
    add_document(big, "more.txt", MORE)
    neighbour = KnowledgeBase.objects.create(name="neighbour", embedder="local")
    add_document(neighbour, "english.txt", ENGLISH)
    with tenant_scope(other_tenant):
        theirs = KnowledgeBase.objects.create(name="theirs", embedder="local")
        add_document(theirs, "english.txt", ENGLISH)
    with tenant_scope(tenant):
        before = _plan(big, "Eiffel Tower")
        assert vectorstore.ensure_own_index(big.pk, 384) is True
        own = vectorstore.own_index_name(384, big.pk)
        assert own in _plan(big, "Eiffel Tower")
        # psycopg binds client-side: the statement carries the literal id, which lets the planner prove the index's
        # predicate (a server-side parameter would not, in a generic plan).
        with CaptureQueriesContext(connection) as queries:
            vector = local_embedder().embed(["Eiffel Tower"])[0]
            vectorstore.PgvectorBackend().search(big, model=local_embedder().model, vector=vector, k=5)
        assert any(f'"knowledge_chunk"."knowledge_base_id" = {big.pk})' in query["sql"] for query in queries)
        neighbour_plan = _plan(neighbour, "Eiffel Tower")
    with tenant_scope(other_tenant):
        their_plan = _plan(theirs, "Eiffel Tower")
    assert vectorstore.index_name(384) in before and own not in before
    for plan in (neighbour_plan, their_plan):
        assert own not in plan and vectorstore.index_name(384) in plan


@pytest.mark.pgvector
def test_search_returns_the_same_chunks_with_the_own_index_as_with_the_shared_one(big):
    add_document(big, "more.txt", MORE)
    shared = _ids(big)
    assert vectorstore.ensure_own_index(big.pk, 384) is True
    assert _ids(big) == shared
    assert shared[("famous landmark in the French capital", "vector")][0] == big.chunks.get(text=ENGLISH[0]).pk


@pytest.mark.pgvector
def test_deleting_the_knowledge_base_drops_its_index(big, ingest):
    add_document(big, "more.txt", MORE)
    other = KnowledgeBase.objects.create(name="other", embedder="local")
    add_document(other, "english.txt", ENGLISH + CHINESE + MORE)
    assert vectorstore.ensure_own_index(big.pk, 384) and vectorstore.ensure_own_index(other.pk, 384)
    with ingest():
        knowledge_base_delete(knowledge_base=big)
    assert vectorstore.own_indexes() == {vectorstore.own_index_name(384, other.pk): (384, other.pk)}
    assert vectorstore.needs_own_index(other.pk, 384) is False


@pytest.mark.pgvector
def test_deleting_it_in_the_admin_drops_its_index_too(big, login, tenant_admin, tenant, ingest):
    add_document(big, "more.txt", MORE)
    assert vectorstore.ensure_own_index(big.pk, 384)
    client = login(tenant_admin, tenant)
    with ingest():
        response = client.post(reverse("admin:knowledge_knowledgebase_delete", args=[big.pk]), {"post": "yes"})
    assert response.status_code == 302 and not KnowledgeBase.objects.filter(pk=big.pk).exists()
    assert vectorstore.own_indexes() == {}


@pytest.mark.pgvector
def test_deleting_the_tenant_drops_its_knowledge_bases_indexes_and_no_other(big, tenant, other_tenant, ingest):
    from tenants.services import tenant_delete

    add_document(big, "more.txt", MORE)
    with tenant_scope(other_tenant):
        theirs = KnowledgeBase.objects.create(name="theirs", embedder="local")
        add_document(theirs, "english.txt", ENGLISH + CHINESE + MORE)
        assert vectorstore.ensure_own_index(theirs.pk, 384)
    assert vectorstore.ensure_own_index(big.pk, 384)
    with ingest():
        tenant_delete(tenant=tenant)
    assert vectorstore.own_indexes() == {vectorstore.own_index_name(384, theirs.pk): (384, theirs.pk)}


@pytest.mark.pgvector
def test_the_command_builds_missing_indexes_and_drops_those_of_deleted_knowledge_bases(big, tenant):
    add_document(big, "more.txt", MORE)  # large now, but no ingestion ran to notice
    gone = KnowledgeBase.objects.create(name="gone", embedder="local")
    add_document(gone, "english.txt", ENGLISH + CHINESE + MORE)
    vectorstore.ensure_own_index(gone.pk, 384)
    gone_id = gone.pk
    gone.delete()  # as a tenant's deletion cascades: not through knowledge_base_delete
    out = io.StringIO()
    call_command("vector_indexes", "--dry-run", stdout=out)
    assert "would build 1, drop 1" in out.getvalue()
    assert vectorstore.own_indexes() == {vectorstore.own_index_name(384, gone_id): (384, gone_id)}
    call_command("vector_indexes", stdout=out)
    assert "built 1, dropped 1" in out.getvalue()
    assert vectorstore.own_indexes() == {vectorstore.own_index_name(384, big.pk): (384, big.pk)}


# --- outside a transaction: CREATE INDEX CONCURRENTLY, the lock, an invalid leftover ---------------------------------


@pytest.fixture
def committed_big(transactional_db, pgvector_db, tenant, threshold):
    with tenant_scope(tenant):
        knowledge_base = KnowledgeBase.objects.create(name="big", embedder="local")
        add_document(knowledge_base, "english.txt", ENGLISH + CHINESE + MORE)
    yield knowledge_base
    vectorstore.drop_own_indexes(knowledge_base.pk)  # indexes outlive the flush of a transactional test


def _valid(name: str) -> bool | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", [name])
        row = cursor.fetchone()
    return None if row is None else row[0]


@pytest.mark.pgvector
def test_outside_a_transaction_the_index_is_built_concurrently_and_an_invalid_leftover_replaced(committed_big, tenant):
    name = vectorstore.own_index_name(384, committed_big.pk)
    with connection.cursor() as cursor:
        cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        if not cursor.fetchone()[0]:
            pytest.skip("marking an index invalid needs a superuser (scripts/pgvector-server connects as one)")
    with tenant_scope(tenant):
        assert connection.get_autocommit() and not connection.in_atomic_block
        assert vectorstore.ensure_own_index(committed_big.pk, 384) is True
        assert _valid(name) is True
        # What a failed CREATE INDEX CONCURRENTLY leaves: the index in the catalog, marked invalid (queries skip it).
        with connection.cursor() as cursor:
            cursor.execute("UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass(%s)", [name])
        vectorstore.clear_caches()
        assert vectorstore.needs_own_index(committed_big.pk, 384)
        assert vectorstore.ensure_own_index(committed_big.pk, 384) is True
        assert _valid(name) is True
        assert vectorstore.ensure_own_index(committed_big.pk, 384) is False  # known now


@pytest.mark.pgvector
def test_a_build_under_way_elsewhere_is_left_to_finish(committed_big, tenant):
    name = vectorstore.own_index_name(384, committed_big.pk)
    settings_dict = connection.settings_dict
    other = psycopg.connect(
        host=settings_dict["HOST"], port=settings_dict["PORT"], user=settings_dict["USER"],
        password=settings_dict["PASSWORD"] or None, dbname=connection.settings_dict["NAME"], autocommit=True,
    )  # fmt: skip
    with other:
        other.execute("SELECT pg_advisory_lock(hashtext(%s))", [name])  # another process is building it
        with tenant_scope(tenant):
            assert vectorstore.ensure_own_index(committed_big.pk, 384) is False
        assert _valid(name) is None
        other.execute("SELECT pg_advisory_unlock(hashtext(%s))", [name])
    with tenant_scope(tenant):
        assert vectorstore.ensure_own_index(committed_big.pk, 384) is True


def test_without_pgvector_nothing_is_built(kb, ingest, settings):
    if vectorstore.uses_pgvector():
        pytest.skip("the exact backend's case")
    settings.KNOWLEDGE_OWN_INDEX_MIN_CHUNKS = 1
    with tenant_scope(kb.tenant), ingest():
        document = document_add(knowledge_base=kb, name="birds.txt", content=" ".join(MORE).encode())
    with tenant_scope(kb.tenant):
        document.refresh_from_db()
        assert document.status == "ready"
        assert vectorstore.needs_own_index(kb.pk, 384) is False
    assert vectorstore.own_indexes() == {}
