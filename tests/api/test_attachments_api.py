"""Files through the REST API (issue 37): upload (multipart), info, bytes with safe headers, sending by id with a
message; bad files refused with a clear error and nothing stored; another member's and another tenant's files are a
404 by id, as a missing one."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from agents.services import conversation_start
from memory.models import Attachment, Message
from tenants.scope import all_tenants, tenant_scope
from tests.api.attachment_files import BAD_FILES, menu_pdf, small_png
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _storage(settings, tmp_path):
    settings.ATTACHMENT_STORAGE_ROOT = str(tmp_path / "attachments")


def _api(secret: str, language: str = "en") -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}", HTTP_ACCEPT_LANGUAGE=language, raise_request_exception=False)


def _upload(client: Client, name: str, data: bytes, **fields):
    return client.post("/api/v1/attachments/", {"file": SimpleUploadedFile(name, data), **fields})


def _stored_files(tmp_path: Path) -> list[Path]:
    root = tmp_path / "attachments"
    return [path for path in root.rglob("*") if path.is_file()] if root.exists() else []


def _count() -> int:
    with all_tenants(reason="test counts what was stored"):
        return Attachment.objects.count()


def test_upload_info_and_bytes_with_safe_headers(published, tenant_admin, make_key):
    _key, secret = make_key(tenant_admin)
    client = _api(secret)
    response = _upload(client, "menu.pdf", menu_pdf())
    assert response.status_code == 201, response.content
    info = response.json()
    assert info["name"] == "menu.pdf" and info["kind"] == "document" and info["pages"] == 2
    assert info["content_type"] == "application/pdf" and "text" not in info

    assert client.get(f"/api/v1/attachments/{info['id']}/").json() == info
    content = client.get(f"/api/v1/attachments/{info['id']}/content/")
    assert content.status_code == 200 and b"".join(content.streaming_content) == menu_pdf()
    assert content["Content-Type"] == "application/pdf"
    assert content["Content-Disposition"].startswith("attachment;")
    assert content["X-Content-Type-Options"] == "nosniff"

    image = _upload(client, "red.png", small_png()).json()
    shown = client.get(f"/api/v1/attachments/{image['id']}/content/", HTTP_ACCEPT="image/avif,image/*")
    assert shown.status_code == 200 and shown["Content-Type"] == "image/png"
    assert shown["Content-Disposition"].startswith("inline")


def test_a_message_carries_uploaded_files_by_id(published, tenant_admin, make_key, scripted_llm):
    _key, secret = make_key(tenant_admin)
    client = _api(secret)
    with tenant_scope(published.solar.tenant):
        conversation = conversation_start(agent=published.solar, user=tenant_admin)
    file_id = _upload(client, "menu.pdf", menu_pdf(), conversation=conversation.pk).json()["id"]
    response = client.post(
        f"/api/v1/conversations/{conversation.pk}/messages/",
        {"content": "What does the Kung Pao chicken cost?", "attachments": [file_id]},
        "application/json",
    )
    assert response.status_code == 200, response.content
    sent = scripted_llm.requests()[-1]["body"]["messages"]
    assert "Kung Pao chicken 38 yuan" in str(sent)  # the small document goes to the model whole
    with tenant_scope(published.solar.tenant):
        attachment = Attachment.objects.get(pk=file_id)
        assert attachment.message_id == response.json()["message"]["id"]
        assert Message.objects.get(pk=attachment.message_id).role == "user"


def test_a_message_with_another_members_file_is_refused_and_nothing_is_stored(
    published, tenant, tenant_admin, member, make_key, scripted_llm
):
    _key, admin_secret = make_key(tenant_admin)
    theirs = _upload(_api(admin_secret), "menu.pdf", menu_pdf()).json()["id"]
    _key, secret = make_key(member)
    with tenant_scope(tenant):
        conversation = conversation_start(agent=published.solar, user=member)
    response = _api(secret).post(
        f"/api/v1/conversations/{conversation.pk}/messages/", {"content": "hi", "attachments": [theirs]},
        "application/json",
    )  # fmt: skip
    assert response.status_code == 404 and response.json()["error"]["code"] == "attachment_not_found"
    with tenant_scope(tenant):
        assert not Message.objects.filter(conversation=conversation).exists()
    bad = _api(secret).post(
        f"/api/v1/conversations/{conversation.pk}/messages/", {"content": "hi", "attachments": ["x"]},
        "application/json",
    )  # fmt: skip
    assert bad.status_code == 400 and "attachments" in bad.json()["error"]["fields"]


@pytest.mark.parametrize("bad", sorted(BAD_FILES))
def test_bad_files_are_refused_with_a_clear_error_and_nothing_is_stored(bad, published, tenant_admin, make_key,
                                                                        tmp_path):  # fmt: skip
    name, make = BAD_FILES[bad]
    _key, secret = make_key(tenant_admin)
    response = _upload(_api(secret), name, make())
    assert response.status_code in (400, 413, 415), response.content
    error = response.json()["error"]
    assert error["code"] in {"executable", "archive_bomb", "too_many_pixels", "broken", "unsupported_type"}
    assert len(error["message"]) > 30  # says what is wrong and what to do
    assert _count() == 0 and _stored_files(tmp_path) == []


def test_a_file_over_the_limit_is_refused_and_nothing_is_stored(published, tenant_admin, make_key, settings,
                                                                tmp_path):  # fmt: skip
    settings.ATTACHMENT_MAX_BYTES = 1000
    _key, secret = make_key(tenant_admin)
    response = _upload(_api(secret), "menu.pdf", menu_pdf() + b"\n" * 2000)
    assert response.status_code == 413 and response.json()["error"]["code"] == "too_large"
    assert "menu.pdf" in response.json()["error"]["message"] or "MB" in response.json()["error"]["message"]
    assert _count() == 0 and _stored_files(tmp_path) == []


def test_another_member_and_another_tenant_cannot_fetch_a_file(published, tenant, other_tenant, tenant_admin,
                                                               member, other_tenant_admin, make_key):  # fmt: skip
    _key, owner_secret = make_key(member)
    file_id = _upload(_api(owner_secret), "red.png", small_png()).json()["id"]
    colleague = UserFactory(username="colleague")
    MembershipFactory(tenant=tenant, user=colleague)
    _key, colleague_secret = make_key(colleague)
    _key, foreign_secret = make_key(other_tenant_admin, owner=other_tenant)
    for secret in (colleague_secret, foreign_secret):
        for url in (f"/api/v1/attachments/{file_id}/", f"/api/v1/attachments/{file_id}/content/"):
            response = _api(secret).get(url)
            assert response.status_code == 404 and response.json()["error"]["code"] == "not_found", url
    # A missing id answers the same.
    assert (
        _api(colleague_secret).get(f"/api/v1/attachments/{file_id + 1000}/").json()
        == _api(colleague_secret).get(f"/api/v1/attachments/{file_id}/").json()
    )


def test_an_upload_into_another_tenants_conversation_is_a_404(published, other_tenant, other_tenant_admin,
                                                              tenant_admin, make_key):  # fmt: skip
    with tenant_scope(other_tenant):
        foreign = conversation_start(agent=published.foreign, user=other_tenant_admin)
    _key, secret = make_key(tenant_admin)
    response = _upload(_api(secret), "red.png", small_png(), conversation=foreign.pk)
    assert response.status_code == 404 and _count() == 0


def test_the_schema_documents_the_attachment_endpoints(published, tenant_admin, make_key):
    _key, secret = make_key(tenant_admin)
    schema = _api(secret).get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()
    upload = schema["paths"]["/api/v1/attachments/"]["post"]
    assert "multipart/form-data" in upload["requestBody"]["content"]
    assert "/api/v1/attachments/{id}/content/" in schema["paths"]
    send = schema["components"]["schemas"]["SendRequest"]["properties"]
    assert send["attachments"]["type"] == "array"
