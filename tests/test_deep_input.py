"""Deeply nested YAML and JSON (the probe's finding: 500s from the workflow editor and import, the agent import, the
admin's JSON fields) get a clear error that names what is wrong, on every way in."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from api.keys import key_create
from tenants.scope import tenant_scope
from tests.llm.test_admin import provider_form

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _english_pages(client):
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"  # the site's default is zh-hans


DEEP_YAML = "version: '1.0'\nname: deep\nsteps: " + "[" * 5000 + "]" * 5000 + "\n"
DEEP_JSON = "[" * 100_000 + "]" * 100_000


def test_the_workflow_editor_names_the_depth(login, tenant, tenant_admin):
    response = login(tenant_admin, tenant).post(reverse("agents:workflows:create"), {"yaml": DEEP_YAML})
    assert response.status_code == 400
    assert "nested more than 64 levels" in response.content.decode()


def test_workflow_and_agent_imports_name_the_depth(login, tenant, tenant_admin):
    client = login(tenant_admin, tenant)
    imported = client.post(
        reverse("agents:workflows:import"), {"file": SimpleUploadedFile("w.yaml", DEEP_YAML.encode())}
    )
    assert imported.status_code == 400 and "nested more than 64 levels" in imported.content.decode()
    agent = client.post(reverse("agents:workflows:agent_import"),
                        {"file": SimpleUploadedFile("a.yaml", DEEP_YAML.encode())}, follow=True)  # fmt: skip
    assert agent.status_code == 200 and "nested more than 64 levels" in agent.content.decode()


def test_the_admins_json_fields_name_the_depth(login, tenant, tenant_admin):
    response = login(tenant_admin, tenant).post(
        reverse("admin:llm_modelprovider_add"), provider_form(chat_models=DEEP_JSON)
    )
    assert response.status_code == 200
    assert "nested more than 64 levels" in str(response.context["adminform"].form.errors["chat_models"])


def test_the_apis_answer_400(client, tenant, tenant_admin):
    with tenant_scope(tenant):
        _key, secret = key_create(tenant=tenant, user=tenant_admin, name="k", scopes=["read", "chat", "write"])
    auth = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    openai = client.post("/v1/chat/completions", DEEP_JSON, "application/json", **auth)
    assert openai.status_code == 400 and openai.json()["error"]["code"] == "invalid_json"
    rest = client.post("/api/v1/agents/", DEEP_JSON, "application/json", **auth)
    assert rest.status_code == 400 and "nested more than 64 levels" in rest.json()["error"]["message"]
    stream = client.post("/api/v1/conversations/1/messages/stream/", DEEP_JSON, "application/json", **auth)
    assert stream.status_code in (400, 404)
