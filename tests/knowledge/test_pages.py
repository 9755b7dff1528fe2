"""The knowledge pages: create, upload several files, the progress endpoint, re-ingest, delete with confirmation,
edit with a re-ingest confirmation, search; roles; another tenant's knowledge base is a 404 everywhere."""

from __future__ import annotations

import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from knowledge.models import Chunk, Document, DocumentStatus, KnowledgeBase
from knowledge.services import document_add
from tenants.scope import all_tenants, tenant_scope
from tests.knowledge.factories import SOLAR_TEXT, sample_files

pytestmark = pytest.mark.django_db

EN = {"HTTP_ACCEPT_LANGUAGE": "en"}


@pytest.fixture(autouse=True)
def _english(client):
    """The assertions read the English texts (the site's default language is zh-hans)."""
    client.defaults.update(EN)


def _files(*names: str) -> list[SimpleUploadedFile]:
    files = sample_files()
    return [SimpleUploadedFile(name, files.get(name, b"whatever")) for name in names]


def _document(kb, ingest, name: str = "notes.txt", content: bytes | None = None) -> Document:
    with tenant_scope(kb.tenant), ingest():
        document = document_add(knowledge_base=kb, name=name, content=content or SOLAR_TEXT.encode())
    with tenant_scope(kb.tenant):
        document.refresh_from_db()
    return document


def _kb_form(**overrides) -> dict:
    data = {
        "name": "Grid manuals",
        "description": "Manuals of the grid equipment.",
        "embedder": "local",
        "embedding_model": "",
        "chunk_size": "200",
        "chunk_overlap": "30",
    }
    data.update(overrides)
    return data


def test_the_home_page_has_a_knowledge_card(login, member, tenant):
    page = login(member, tenant).get(reverse("home")).content.decode()
    assert reverse("knowledge:list") in page


def test_an_admin_creates_a_knowledge_base_and_sees_the_embedder_notes(login, tenant_admin, tenant):
    client = login(tenant_admin, tenant)
    page = client.get(reverse("knowledge:create")).content.decode()
    assert "understands English only" in page and "bge-m3" in page and "Ollama or vLLM" in page
    assert "Reads Chinese, English and about 90 other languages" in page
    assert re.search(r'value="local_multilingual"[^>]*checked', page)  # the default for a new knowledge base
    response = client.post(reverse("knowledge:create"), _kb_form())
    with tenant_scope(tenant):
        kb = KnowledgeBase.objects.get(name="Grid manuals")
    assert response.status_code == 302 and response.url == reverse("knowledge:detail", args=[kb.pk])
    assert (kb.tenant_id, kb.chunk_size, kb.chunk_overlap) == (tenant.pk, 200, 30)
    listing = client.get(reverse("knowledge:list")).content.decode()
    assert "Grid manuals" in listing


@pytest.mark.parametrize(
    ("overrides", "field", "text"),
    [
        ({"chunk_overlap": "200"}, "chunk_overlap", "smaller than the chunk size"),
        ({"chunk_size": "10"}, "chunk_size", "greater than or equal to 32"),
        ({"name": ""}, "name", "required"),
    ],
)
def test_bad_settings_show_next_to_the_field(login, tenant_admin, tenant, overrides, field, text):
    response = login(tenant_admin, tenant).post(reverse("knowledge:create"), _kb_form(**overrides))
    assert response.status_code == 200
    assert text in " ".join(response.context["form"].errors[field])


def test_a_duplicate_name_is_refused_on_the_name(login, tenant_admin, tenant, kb):
    response = login(tenant_admin, tenant).post(reverse("knowledge:create"), _kb_form(name=kb.name))
    assert response.status_code == 200 and response.context["form"].errors


def test_uploading_several_files_ingests_each_and_refuses_bad_ones(login, tenant_admin, tenant, kb, ingest):
    client = login(tenant_admin, tenant)
    files = [*_files("notes.txt", "menu.json", "report.pdf"), SimpleUploadedFile("tool.exe", b"MZ")]
    with ingest():
        response = client.post(reverse("knowledge:upload", args=[kb.pk]), {"files": files})
    assert response.status_code == 302
    page = client.get(response.url).content.decode()  # the messages show on the next page
    assert "Uploaded 3 files" in page and "“tool.exe” is not a supported file type" in page
    with tenant_scope(tenant):
        documents = {d.name: d for d in Document.objects.filter(knowledge_base=kb)}
    assert set(documents) == {"notes.txt", "menu.json", "report.pdf"}
    assert all(d.status == DocumentStatus.READY for d in documents.values())
    for document in documents.values():
        assert f'data-document="{document.pk}" data-status="ready"' in page


def test_a_file_over_the_limit_is_refused_before_it_is_read(login, tenant_admin, tenant, kb, settings):
    settings.KNOWLEDGE_MAX_UPLOAD_BYTES = 10
    response = login(tenant_admin, tenant).post(
        reverse("knowledge:upload", args=[kb.pk]), {"files": _files("notes.txt")}, follow=True
    )
    assert "the largest file a knowledge base accepts is 10" in response.content.decode()
    with tenant_scope(tenant):
        assert not Document.objects.exists()


def test_the_progress_endpoint_reports_each_document(login, member, tenant, kb, ingest):
    ready = _document(kb, ingest)
    failed = _document(kb, ingest, "scan.pdf", b"not a pdf")
    with tenant_scope(tenant):
        waiting = document_add(knowledge_base=kb, name="later.txt", content=b"Later.", queue=False)
    response = login(member, tenant).get(reverse("knowledge:progress", args=[kb.pk]))
    data = response.json()
    rows = {row["id"]: row for row in data["documents"]}
    assert data["active"] is True  # later.txt waits
    assert rows[ready.pk]["status"] == "ready" and rows[ready.pk]["progress"] == 100
    assert rows[ready.pk]["chunk_count"] == ready.chunk_count > 0
    assert rows[failed.pk]["status"] == "failed" and "not a PDF" in rows[failed.pk]["error"]
    assert rows[waiting.pk]["status"] == "pending" and rows[waiting.pk]["stage_label"] == "Queued"


def test_the_detail_page_polls_only_while_something_moves(login, member, tenant, kb, ingest):
    document = _document(kb, ingest, "scan.pdf", b"not a pdf")
    page = login(member, tenant).get(reverse("knowledge:detail", args=[kb.pk])).content.decode()
    assert "knowledge/progress.js" in page and f'data-document="{document.pk}" data-status="failed"' in page
    assert document.error in page
    assert reverse("knowledge:progress", args=[kb.pk]) in page
    assert 'id="upload-form"' not in page  # members do not upload


def test_reingest_button_and_delete_with_confirmation(login, tenant_admin, tenant, kb, ingest):
    document = _document(kb, ingest)
    client = login(tenant_admin, tenant)
    with ingest():
        response = client.post(reverse("knowledge:document_reingest", args=[kb.pk, document.pk]))
    assert response.status_code == 302
    with tenant_scope(tenant):
        assert Document.objects.get(pk=document.pk).ingested_at > document.ingested_at

    url = reverse("knowledge:document_delete", args=[kb.pk, document.pk])
    confirm = client.get(url).content.decode()
    assert "Delete “notes.txt”?" in confirm and f"{document.chunk_count} chunks are deleted" in confirm
    with tenant_scope(tenant):
        assert Document.objects.filter(pk=document.pk).exists()  # asking deletes nothing
    with ingest():
        response = client.post(url)
    assert response.status_code == 302
    with tenant_scope(tenant):
        assert not Document.objects.filter(pk=document.pk).exists()
        assert not Chunk.objects.filter(knowledge_base=kb).exists()


def test_documents_from_an_older_local_model_are_flagged_and_ingested_again(
    login, tenant_admin, member, tenant, kb, other_kb, ingest
):
    """After an upgrade of the local model, vector search skips the old vectors: the page says so and one
    button re-ingests exactly those documents (another tenant's outdated documents stay as they are)."""
    current = _document(kb, ingest, "current.txt")
    old = _document(kb, ingest, "old.txt", b"Inverters convert direct current to alternating current.")
    theirs = _document(other_kb, ingest, "theirs.txt", b"Noodles need patience.")
    with all_tenants(reason="test: pretend these were embedded by the previous model"):
        Document.objects.filter(pk__in=[old.pk, theirs.pk]).update(embedded_with="local:all-MiniLM-L6-v2-int8:384")
    page = login(member, tenant).get(reverse("knowledge:detail", args=[kb.pk])).content.decode()
    assert "1 document was embedded with an older version of the local model" in page
    assert 'id="reingest-outdated"' not in page  # members read; only owners and admins act

    client = login(tenant_admin, tenant)
    assert 'id="reingest-outdated"' in client.get(reverse("knowledge:detail", args=[kb.pk])).content.decode()
    chinese = client.get(reverse("knowledge:detail", args=[kb.pk]), HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "1 个文档的向量来自旧版本的本地嵌入模型" in chinese and "重新入库" in chinese
    with ingest():
        response = client.post(reverse("knowledge:reingest_outdated", args=[kb.pk]), follow=True)
    assert "1 document is being ingested again with the current model." in response.content.decode()
    assert "older version of the local model" not in response.content.decode()
    with tenant_scope(tenant):
        refreshed = {d.pk: d for d in Document.objects.filter(knowledge_base=kb)}
    assert refreshed[old.pk].embedded_with == current.embedded_with and refreshed[old.pk].ingested_at > old.ingested_at
    assert refreshed[current.pk].ingested_at == current.ingested_at  # up to date: left alone
    with all_tenants(reason="test: the other tenant's document is untouched"):
        assert Document.objects.get(pk=theirs.pk).embedded_with == "local:all-MiniLM-L6-v2-int8:384"


def test_the_reingest_outdated_command_covers_every_tenant(tenant, kb, other_kb, ingest):
    from io import StringIO

    from django.core.management import call_command

    mine = _document(kb, ingest, "old.txt")
    theirs = _document(other_kb, ingest, "theirs.txt", b"Noodles need patience.")
    with all_tenants(reason="test: pretend these were embedded by the previous model"):
        Document.objects.filter(pk__in=[mine.pk, theirs.pk]).update(embedded_with="local:old-model:384")
    out = StringIO()
    call_command("reingest_outdated", "--dry-run", stdout=out)
    assert "2 documents outdated" in out.getvalue()
    with ingest():
        call_command("reingest_outdated", stdout=StringIO())
    with all_tenants(reason="test: both were ingested again"):
        signatures = set(Document.objects.filter(pk__in=[mine.pk, theirs.pk]).values_list("embedded_with", flat=True))
    assert signatures == {"local_multilingual:multilingual-e5-small-qint8:384"}


def test_editing_the_chunking_asks_before_reingesting(login, tenant_admin, tenant, kb, ingest):
    document = _document(kb, ingest, content=(SOLAR_TEXT * 3).encode())
    client = login(tenant_admin, tenant)
    url = reverse("knowledge:edit", args=[kb.pk])
    form = _kb_form(name=kb.name, chunk_size="300", chunk_overlap="0")
    response = client.post(url, form)
    assert response.status_code == 200
    assert "Saving re-ingests the 1 document" in response.content.decode()
    with tenant_scope(tenant):
        assert KnowledgeBase.objects.get(pk=kb.pk).chunk_size == 60  # not saved yet

    with ingest():
        response = client.post(url, {**form, "confirm_reingest": "on"}, follow=True)
    assert "1 document is being ingested again" in response.content.decode()
    with tenant_scope(tenant):
        assert KnowledgeBase.objects.get(pk=kb.pk).chunk_size == 300
        after = Document.objects.get(pk=document.pk)
    assert after.status == DocumentStatus.READY and after.chunk_count < document.chunk_count

    response = client.post(url, {**form, "description": "Just a new description."})
    assert response.status_code == 302  # nothing to re-ingest: saved at once


def test_deleting_a_knowledge_base_asks_first(login, tenant_admin, tenant, kb, ingest):
    _document(kb, ingest)
    client = login(tenant_admin, tenant)
    url = reverse("knowledge:delete", args=[kb.pk])
    assert "This cannot be undone" in client.get(url).content.decode()
    with ingest():
        response = client.post(url)
    assert response.status_code == 302 and response.url == reverse("knowledge:list")
    with tenant_scope(tenant):
        assert not KnowledgeBase.objects.filter(pk=kb.pk).exists() and not Chunk.objects.exists()


def test_the_search_page_ranks_chunks_with_scores_and_sources(login, member, tenant, kb, ingest):
    _document(kb, ingest, "menu.json", sample_files()["menu.json"])
    _document(kb, ingest)
    client = login(member, tenant)
    page = client.get(reverse("knowledge:search", args=[kb.pk])).content.decode()
    assert 'name="q"' in page and "search-results" not in page
    response = client.get(reverse("knowledge:search", args=[kb.pk]), {"q": "香菇", "mode": "hybrid", "top_k": "3"})
    results = response.context["results"]
    assert results and results[0]["hit"].document_name == "menu.json"
    assert "香菇黄焖鸡" in results[0]["hit"].text
    assert [r["rank"] for r in results] == list(range(1, len(results) + 1))
    scores = [r["hit"].score for r in results]
    assert scores == sorted(scores, reverse=True)
    page = response.content.decode()
    assert 'id="search-results"' in page and "menu.json" in page and "data-retriever=" in page
    assert results[0]["hit"].position == 2 and "chunk 3" in page  # counted from 1 on the page, as agents cite
    assert "key: 3" in page and "record:" not in page  # where the chunk is, not its fields again


def test_a_bad_search_shows_the_form_errors(login, member, tenant, kb):
    response = login(member, tenant).get(reverse("knowledge:search", args=[kb.pk]), {"q": "x", "top_k": "500"})
    assert response.context["results"] is None and "top_k" in response.context["form"].errors


@pytest.mark.parametrize(
    ("name", "method"),
    [
        ("knowledge:create", "get"),
        ("knowledge:edit", "get"),
        ("knowledge:delete", "post"),
        ("knowledge:upload", "post"),
        ("knowledge:reingest_outdated", "post"),
    ],
)
def test_members_read_but_do_not_change(login, member, tenant, kb, name, method):
    client = login(member, tenant)
    args = [] if name == "knowledge:create" else [kb.pk]
    response = getattr(client, method)(reverse(name, args=args))
    assert response.status_code == 403
    assert "Only owners and admins" in response.content.decode()
    assert client.get(reverse("knowledge:detail", args=[kb.pk])).status_code == 200
    with tenant_scope(tenant):
        assert KnowledgeBase.objects.filter(pk=kb.pk).exists()


def test_another_tenants_knowledge_base_is_a_404_on_every_page(login, tenant_admin, tenant, kb, other_kb, ingest):
    theirs = _document(other_kb, ingest, "secret.txt", b"The noodle secret is patience.")
    mine = _document(kb, ingest)
    client = login(tenant_admin, tenant)
    kb_pages = ["detail", "edit", "delete", "progress", "search"]
    for name in kb_pages:
        assert client.get(reverse(f"knowledge:{name}", args=[other_kb.pk]), {"q": "noodle"}).status_code == 404
    assert client.post(reverse("knowledge:delete", args=[other_kb.pk])).status_code == 404
    assert client.post(reverse("knowledge:edit", args=[other_kb.pk]), _kb_form(name="Hijacked")).status_code == 404
    upload = client.post(reverse("knowledge:upload", args=[other_kb.pk]), {"files": _files("notes.txt")})
    assert upload.status_code == 404
    assert client.post(reverse("knowledge:reingest_outdated", args=[other_kb.pk])).status_code == 404
    for name in ("document_reingest", "document_delete"):
        url = reverse(f"knowledge:{name}", args=[other_kb.pk, theirs.pk])
        assert client.post(url).status_code == 404
        # Their document under my knowledge base's id is no better.
        assert client.post(reverse(f"knowledge:{name}", args=[kb.pk, theirs.pk])).status_code == 404
    listing = client.get(reverse("knowledge:list")).content.decode()
    assert "Noodle secrets" not in listing and kb.name in listing
    progress = client.get(reverse("knowledge:progress", args=[kb.pk])).json()
    assert [row["id"] for row in progress["documents"]] == [mine.pk]
    with all_tenants(reason="test: the other tenant's rows are untouched"):
        assert KnowledgeBase.objects.get(pk=other_kb.pk).name == "Noodle secrets"
        assert Document.objects.get(pk=theirs.pk).status == DocumentStatus.READY
        assert Chunk.objects.filter(document_id=theirs.pk).count() == theirs.chunk_count


def test_pages_need_a_login(client, kb):
    response = client.get(reverse("knowledge:progress", args=[kb.pk]))
    assert response.status_code == 302 and "login" in response.url
