"""The knowledge admin: the vector backend shown, upload through the admin, re-ingest action, read-only chunks,
and a tenant admin who sees only the active tenant's rows and is refused every other tenant's object."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from knowledge.models import Chunk, Document, DocumentStatus, KnowledgeBase
from knowledge.services import document_add
from knowledge.vectorstore import backend_name
from tenants.scope import all_tenants, tenant_scope
from tests.knowledge.factories import SOLAR_TEXT

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _english(client):
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"


def _document(kb, ingest, name: str, content: bytes) -> Document:
    with tenant_scope(kb.tenant), ingest():
        document = document_add(knowledge_base=kb, name=name, content=content)
    with tenant_scope(kb.tenant):
        document.refresh_from_db()
    return document


@pytest.fixture
def rows(kb, other_kb, ingest):
    mine = _document(kb, ingest, "solar.txt", SOLAR_TEXT.encode())
    theirs = _document(other_kb, ingest, "noodles.txt", b"The noodle secret is patience.")
    with tenant_scope(kb.tenant):
        my_chunk = Chunk.objects.filter(document=mine).first()
    with tenant_scope(other_kb.tenant):
        their_chunk = Chunk.objects.filter(document=theirs).first()
    return {"mine": mine, "theirs": theirs, "my_chunk": my_chunk, "their_chunk": their_chunk}


def test_the_active_vector_backend_is_shown(login, tenant_admin, tenant, kb):
    client = login(tenant_admin, tenant)
    expected = "pgvector (HNSW index" if backend_name() == "pgvector" else "exact (in-process cosine search"
    listing = client.get(reverse("admin:knowledge_knowledgebase_changelist")).content.decode()
    assert 'id="vector-backend"' in listing and expected in listing
    assert expected in client.get(reverse("admin:knowledge_knowledgebase_change", args=[kb.pk])).content.decode()


def test_a_tenant_admin_uploads_through_the_admin(login, tenant_admin, tenant, kb, ingest):
    client = login(tenant_admin, tenant)
    upload = SimpleUploadedFile("admin-notes.txt", SOLAR_TEXT.encode())
    with ingest():
        response = client.post(reverse("admin:knowledge_document_add"), {"knowledge_base": kb.pk, "file": upload})
    assert response.status_code == 302
    with tenant_scope(tenant):
        document = Document.objects.get(name="admin-notes.txt")
    assert document.tenant_id == tenant.pk and document.status == DocumentStatus.READY and document.chunk_count > 0
    page = client.get(reverse("admin:knowledge_document_change", args=[document.pk])).content.decode()
    assert "admin-notes.txt" in page and 'name="file"' not in page  # read-only once stored


def test_a_bad_file_is_refused_on_the_admin_form(login, tenant_admin, tenant, kb):
    client = login(tenant_admin, tenant)
    upload = SimpleUploadedFile("tool.exe", b"MZ")
    response = client.post(reverse("admin:knowledge_document_add"), {"knowledge_base": kb.pk, "file": upload})
    assert response.status_code == 200
    assert "not a supported file type" in " ".join(response.context["adminform"].form.errors["file"])


def test_the_admin_upload_offers_only_the_tenants_knowledge_bases(login, tenant_admin, tenant, kb, other_kb):
    client = login(tenant_admin, tenant)
    page = client.get(reverse("admin:knowledge_document_add")).content.decode()
    assert "Solar notes" in page and "Noodle secrets" not in page
    upload = SimpleUploadedFile("sneaky.txt", b"Sneaky.")
    response = client.post(reverse("admin:knowledge_document_add"), {"knowledge_base": other_kb.pk, "file": upload})
    assert response.status_code == 200 and "knowledge_base" in response.context["adminform"].form.errors
    with all_tenants(reason="test: nothing was added to the other tenant"):
        assert not Document.objects.filter(name="sneaky.txt").exists()


def test_reingest_action_and_chunk_settings_change(login, tenant_admin, tenant, kb, rows, ingest):
    client = login(tenant_admin, tenant)
    mine = rows["mine"]
    with ingest():
        response = client.post(
            reverse("admin:knowledge_document_changelist"), {"action": "reingest", "_selected_action": [mine.pk]}
        )
    assert response.status_code == 302
    with tenant_scope(tenant):
        assert Document.objects.get(pk=mine.pk).ingested_at > mine.ingested_at

    form = {"name": kb.name, "description": "", "embedder": "local", "embedding_model": "", "chunk_size": "500",
            "chunk_overlap": "0", "documents-TOTAL_FORMS": "0", "documents-INITIAL_FORMS": "0"}  # fmt: skip
    with ingest():
        response = client.post(reverse("admin:knowledge_knowledgebase_change", args=[kb.pk]), form, follow=True)
    assert "1 document is being ingested again" in response.content.decode()
    with tenant_scope(tenant):
        assert Document.objects.get(pk=mine.pk).chunk_count == 1  # one chunk of up to 500 tokens now

    response = client.post(
        reverse("admin:knowledge_knowledgebase_change", args=[kb.pk]), {**form, "chunk_overlap": "500"}
    )
    assert "smaller than the chunk size" in " ".join(response.context["adminform"].form.errors["chunk_overlap"])


def test_chunks_are_read_only(login, tenant_admin, tenant, rows):
    client = login(tenant_admin, tenant)
    chunk = rows["my_chunk"]
    page = client.get(reverse("admin:knowledge_chunk_change", args=[chunk.pk])).content.decode()
    assert chunk.text[:30] in page and "(384)" in page and 'name="text"' not in page
    assert client.get(reverse("admin:knowledge_chunk_add")).status_code == 403


def test_a_tenant_admin_sees_only_their_tenants_rows(login, tenant_admin, tenant, rows):
    client = login(tenant_admin, tenant)
    for model, mine, theirs in [
        ("knowledgebase", "Solar notes", "Noodle secrets"),
        ("document", "solar.txt", "noodles.txt"),
        ("chunk", "Solar panels", "noodle secret"),
    ]:
        listing = client.get(reverse(f"admin:knowledge_{model}_changelist")).content.decode()
        assert mine in listing and theirs not in listing, model


def test_another_tenants_objects_are_refused_on_every_admin_page(login, tenant_admin, tenant, rows, other_kb):
    client = login(tenant_admin, tenant)
    theirs = rows["theirs"]
    objects = [("knowledgebase", other_kb.pk), ("document", theirs.pk), ("chunk", rows["their_chunk"].pk)]
    for model, pk in objects:
        for view in ("change", "delete", "history"):
            response = client.get(reverse(f"admin:knowledge_{model}_{view}", args=[pk]), follow=True)
            assert response.redirect_chain or response.status_code in (403, 404), (model, view)
            page = response.content.decode()
            assert "Noodle secrets" not in page and "noodle secret" not in page, (model, view)
    client.post(reverse("admin:knowledge_document_changelist"), {"action": "reingest", "_selected_action": [theirs.pk]})
    client.post(
        reverse("admin:knowledge_knowledgebase_changelist"),
        {"action": "reingest_all", "_selected_action": [other_kb.pk]},
    )
    client.post(reverse("admin:knowledge_knowledgebase_delete", args=[other_kb.pk]), {"post": "yes"})
    client.post(reverse("admin:knowledge_document_delete", args=[theirs.pk]), {"post": "yes"})
    with all_tenants(reason="test: the other tenant's rows are untouched"):
        assert KnowledgeBase.objects.filter(pk=other_kb.pk).exists()
        after = Document.objects.get(pk=theirs.pk)
        assert after.status == DocumentStatus.READY and after.ingested_at == theirs.ingested_at


def test_a_member_is_refused_by_the_admin(login, member, tenant, kb):
    response = login(member, tenant).get(reverse("admin:knowledge_knowledgebase_changelist"))
    assert response.status_code == 302 and "login" in response.url


def test_the_platform_superuser_sees_every_tenant(login, superuser, tenant, rows):
    listing = login(superuser, tenant).get(reverse("admin:knowledge_document_changelist")).content.decode()
    assert "solar.txt" in listing and "noodles.txt" in listing


def test_deleting_a_tenant_in_the_admin_removes_its_knowledge_files_and_leaves_the_others(
    client, superuser, rows, kb, other_kb, ingest
):
    """A tenant's deletion cascades to its rows; its knowledge bases' stored files go with it (through the knowledge
    bases' own deletion), and another tenant's knowledge base and files are untouched."""
    from django.core.files.storage import default_storage

    mine, theirs = rows["mine"].file.name, rows["theirs"].file.name
    assert default_storage.exists(mine) and default_storage.exists(theirs)
    client.force_login(superuser)
    with ingest():
        response = client.post(reverse("admin:tenants_tenant_delete", args=[kb.tenant.pk]), {"post": "yes"})
    assert response.status_code == 302
    with all_tenants(reason="the test checks both tenants' rows"):
        assert not KnowledgeBase.objects.filter(pk=kb.pk).exists()
        assert not Document.objects.filter(pk=rows["mine"].pk).exists()
        assert Document.objects.filter(pk=rows["theirs"].pk, knowledge_base=other_kb).exists()
    assert not default_storage.exists(mine)
    assert default_storage.exists(theirs)
