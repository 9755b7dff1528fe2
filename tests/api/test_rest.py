"""The REST API under /api/v1/: keys and sessions, scopes, tenant isolation, one error shape, the schema and its
pages served without a CDN."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from agents.services import conversation_start
from api.models import KeyScope
from memory.models import Message
from tenants.scope import tenant_scope

pytestmark = pytest.mark.django_db(transaction=True)


def _api(secret: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}")


def test_agents_list_with_a_key_shows_its_published_agents(published, tenant_admin, make_key):
    _key, secret = make_key(tenant_admin)
    body = _api(secret).get("/api/v1/agents/").json()
    assert body["count"] == 2
    assert {row["slug"] for row in body["results"]} == {published.solar.slug, published.pv.slug}
    assert all(row["published_version"] == 1 for row in body["results"])


def test_another_tenants_agent_and_conversation_are_404(published, tenant_admin, other_tenant, other_tenant_admin,
                                                         make_key):  # fmt: skip
    with tenant_scope(other_tenant):
        theirs = conversation_start(agent=published.foreign, user=other_tenant_admin)
    _key, secret = make_key(tenant_admin, scopes=list(KeyScope.values))
    client = _api(secret)
    for url in (
        f"/api/v1/agents/{published.foreign.pk}/",
        f"/api/v1/conversations/{theirs.pk}/",
        f"/api/v1/conversations/{theirs.pk}/messages/",
    ):
        response = client.get(url)
        assert response.status_code == 404, url
        assert set(response.json()["error"]) >= {"code", "message"}
    response = client.post(f"/api/v1/conversations/{theirs.pk}/messages/", {"content": "hi"}, "application/json")
    assert response.status_code == 404
    assert client.post(f"/api/v1/agents/{published.foreign.pk}/publish/").status_code == 404


def test_send_blocking_and_a_resend_runs_once(published, tenant_admin, make_key, scripted_llm):
    _key, secret = make_key(tenant_admin)
    client = _api(secret)
    created = client.post("/api/v1/conversations/", {"agent": published.solar.pk}, "application/json")
    assert created.status_code == 201, created.content
    url = f"/api/v1/conversations/{created.json()['id']}/messages/"
    first = client.post(url, {"content": "panels?", "client_id": "c-1"}, "application/json")
    assert first.status_code == 200, first.content
    assert first.json()["status"] == "completed" and first.json()["reply"]["content"] == "You said: panels?"
    again = client.post(url, {"content": "panels?", "client_id": "c-1"}, "application/json").json()
    assert again["duplicate"] is True and again["reply"]["id"] == first.json()["reply"]["id"]
    assert len(scripted_llm.requests()) == 1
    listed = client.get(url).json()
    assert [row["role"] for row in listed["results"]] == ["user", "assistant"]


def test_scopes_are_enforced(published, tenant_admin, make_key):
    _key, read_only = make_key(tenant_admin, scopes=[KeyScope.READ])
    response = _api(read_only).post("/api/v1/conversations/", {"agent": published.solar.pk}, "application/json")
    assert response.status_code == 403 and response.json()["error"]["code"] == "permission_denied"
    _key, chat_only = make_key(tenant_admin, scopes=[KeyScope.CHAT])
    assert _api(chat_only).get("/api/v1/agents/").status_code == 403
    assert _api(chat_only).post(f"/api/v1/agents/{published.solar.pk}/publish/").status_code == 403


def test_publishing_needs_an_administrators_key(published, tenant, member, tenant_admin, make_key):
    _key, members = make_key(member, scopes=[KeyScope.READ, KeyScope.WRITE])
    assert _api(members).post(f"/api/v1/agents/{published.draft.pk}/publish/").status_code == 404  # drafts unseen
    assert _api(members).post(f"/api/v1/agents/{published.solar.pk}/publish/").status_code == 403
    _key, admins = make_key(tenant_admin, scopes=[KeyScope.READ, KeyScope.WRITE])
    response = _api(admins).post(f"/api/v1/agents/{published.solar.pk}/publish/")
    assert response.status_code == 201 and response.json()["number"] == 2


def test_a_member_sees_only_their_own_conversations(published, tenant, member, tenant_admin, make_key, login):
    with tenant_scope(tenant):
        mine = conversation_start(agent=published.solar, user=member)
        admins = conversation_start(agent=published.solar, user=tenant_admin)
        Message.objects.create(tenant=tenant, conversation=admins, role="user", content="secret plan")
    _key, secret = make_key(member)
    listed = _api(secret).get("/api/v1/conversations/").json()
    assert [row["id"] for row in listed["results"]] == [mine.pk]
    assert _api(secret).get(f"/api/v1/conversations/{admins.pk}/messages/").status_code == 404
    session = login(member, tenant)  # the pages' own use: a session works too
    assert [row["id"] for row in session.get("/api/v1/conversations/").json()["results"]] == [mine.pk]


def test_errors_have_one_shape_in_the_requests_language(published, tenant_admin, make_key):
    _key, secret = make_key(tenant_admin)
    client = _api(secret)
    response = client.post("/api/v1/conversations/", {"agent": "x"}, "application/json", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error" and "agent" in error["fields"]
    assert error["message"] == "部分字段无效。"
    english = client.post("/api/v1/conversations/", {"agent": "x"}, "application/json", HTTP_ACCEPT_LANGUAGE="en")
    assert english.json()["error"]["message"] == "Some fields are not valid."
    unauthenticated = Client().get("/api/v1/agents/")
    assert unauthenticated.status_code in (401, 403) and "code" in unauthenticated.json()["error"]
    wrong = Client(HTTP_AUTHORIZATION="Bearer ak-0000000000.nope").get("/api/v1/agents/")
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"


def test_the_schema_builds_without_a_warning(tmp_path):
    from django.core.management import call_command

    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yml"))
    assert "/api/v1/knowledge-bases/{id}/search/" in (tmp_path / "schema.yml").read_text()


def test_schema_and_its_pages_are_served_without_a_cdn(client):
    schema = client.get(reverse("api:schema"), HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    assert "/api/v1/conversations/{id}/messages/" in schema.json()["paths"]
    swagger = client.get(reverse("api:swagger")).content.decode()
    assert "cdn." not in swagger and "/static/drf_spectacular_sidecar/" in swagger
    # ReDoc's bundle is served by the platform (config.redoc), without the logo it would fetch from its CDN.
    redoc = client.get(reverse("api:redoc")).content.decode()
    assert "cdn." not in redoc and '<script src="/api/redoc.standalone.js">' in redoc
    bundle = client.get("/api/redoc.standalone.js").content
    assert len(bundle) > 100_000 and b"cdn.redoc.ly" not in bundle
