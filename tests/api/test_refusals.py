"""What the REST API refuses, and how: format-suffix URLs (L3), writes of a key limited to some agents (L5), one error
shape with specific codes in the request's language (newcomer), JSON nested too deep (info). Each test is named for
the finding of the probe it answers."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.resolvers import RoutePattern
from drf_spectacular.generators import SchemaGenerator

from agents.export import agent_export
from agents.models import Agent, AgentVersion
from agents.services import conversation_start
from api.models import KeyScope
from knowledge.models import Document, KnowledgeBase
from knowledge.services import document_add, knowledge_base_create
from memory.models import Conversation, Message
from plans import services as plan_services
from plans.models import Plan
from tenants.scope import tenant_scope
from tests.agents.factories import echo_workflow_yaml

pytestmark = pytest.mark.django_db(transaction=True)

ALL = list(KeyScope.values)


def _api(secret: str, language: str = "en") -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}", HTTP_ACCEPT_LANGUAGE=language, raise_request_exception=False)


# --- L3: format-suffix URLs --------------------------------------------------------------------------------------


def _sample(pattern: Any) -> str:
    """A concrete path for one URL pattern: each parameter given a sample value, regex syntax removed."""
    text = str(pattern.pattern)
    if isinstance(pattern.pattern, RoutePattern):  # path(): its converters
        return re.sub(r"<(?:\w+:)?\w+>", "1", text)
    out, i = [], 0
    while i < len(text):
        if text.startswith("(?P<", i):  # a named group, parentheses inside it counted
            name = text[i + 4 : text.index(">", i)]
            depth, j = 0, i
            while True:
                depth += {"(": 1, ")": -1}.get(text[j], 0) if text[j - 1 : j] != "\\" else 0
                j += 1
                if depth == 0:
                    break
            out.append(str(uuid.uuid4()) if name == "planId" else "1")
            i = j
            continue
        out.append(text[i])
        i += 1
    return "".join(out).replace("^", "").replace("$", "").replace(r"\Z", "").replace("/?", "/").replace("\\.", ".")


def _paths(patterns: list, prefix: str = "/") -> list[str]:
    paths = []
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            paths += _paths(pattern.url_patterns, prefix + _sample(pattern))
        elif isinstance(pattern, URLPattern):
            paths.append(prefix + _sample(pattern))
    return paths


def test_l3_no_format_suffix_url_of_the_api_is_a_server_error(published, tenant_admin, make_key):
    _key, secret = make_key(tenant_admin, scopes=ALL)
    client = _api(secret)
    paths = sorted({path for path in _paths(get_resolver().url_patterns) if path.startswith("/api/v1/")})
    assert {"/api/v1/usage/", "/api/v1/knowledge-bases/", "/api/v1/agents/1/export/"} <= set(paths)
    for path in paths:
        stem = path.rstrip("/")
        for url in (f"{stem}.json", f"{stem}.json/", f"{stem}.api"):
            for method in ("get", "post", "patch", "delete"):
                response = getattr(client, method)(url)
                assert response.status_code < 500, (method, url, response.status_code)
    assert client.get("/api/v1/usage.json").status_code == 404
    assert client.get(f"/api/v1/agents/{published.solar.pk}/export.json").status_code == 404
    assert client.get("/api/v1/usage/").status_code == 200  # the URLs without a suffix still answer


# --- L5: a key limited to some agents ---------------------------------------------------------------------------


def _snapshot(tenant) -> dict[str, Any]:
    with tenant_scope(tenant):
        return {
            "agents": list(Agent.objects.order_by("pk").values("pk", "name", "description", "active", "updated_at")),
            "versions": AgentVersion.objects.count(),
            "knowledge_bases": list(KnowledgeBase.objects.order_by("pk").values("pk", "name", "updated_at")),
            "documents": list(Document.objects.order_by("pk").values_list("pk", flat=True)),
            "conversations": Conversation.objects.count(),
            "messages": Message.objects.count(),
            "plans": list(Plan.objects.order_by("pk").values_list("pk", "status")),
        }


def _write_operations() -> list[tuple[str, str]]:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return sorted(
        (path, method)
        for path, item in schema["paths"].items()
        for method in item
        if method in ("post", "put", "patch", "delete")
    )


def test_l5_a_key_limited_to_one_agent_writes_nothing_else(tenant, tenant_admin, make_key, published, settings,
                                                           tmp_path):  # fmt: skip
    settings.MEDIA_ROOT = str(tmp_path)
    with tenant_scope(tenant):
        knowledge_base = knowledge_base_create(tenant=tenant, name="Manual")
        document = document_add(knowledge_base=knowledge_base, name="a.txt", content=b"Panels face south.")
        conversation = conversation_start(agent=published.solar, user=tenant_admin)
        plan = plan_services.plan_create(
            conversation=conversation, name="PV", user_query="q", allow_concurrency=False,
            steps=[{"seqNo": 1, "agentName": "Solar advisor", "requirement": "r"}],
        )  # fmt: skip
        exported = agent_export(agent=published.pv)
    _key, secret = make_key(tenant_admin, scopes=ALL, agents=[published.pv])
    values = {"{id}": str(published.solar.pk), "{planId}": str(plan.planId), "{document_id}": str(document.pk),
              "{message_id}": "1"}  # fmt: skip
    bodies = {
        ("/api/v1/agents/", "post"): {"name": "Made by a narrow key"},
        ("/api/v1/agents/import/", "post"): {"yaml": exported},
        ("/api/v1/agents/{id}/", "patch"): {"description": "changed"},
        ("/api/v1/knowledge-bases/", "post"): {"name": "Another"},
        ("/api/v1/knowledge-bases/{id}/", "patch"): {"name": "Renamed"},
        ("/api/v1/conversations/", "post"): {"agent": published.solar.pk},
        ("/api/v1/conversations/{id}/messages/", "post"): {"content": "hi"},
        ("/api/v1/workflows/validate/", "post"): {"yaml": echo_workflow_yaml("Echo")},
    }
    before = _snapshot(tenant)
    operations = _write_operations()
    assert ("/api/v1/knowledge-bases/{id}/", "delete") in operations and len(operations) >= 12
    client = _api(secret)
    for path, method in [*operations, ("/api/v1/conversations/{id}/messages/stream/", "post")]:
        url = path
        for name, value in values.items():
            # Knowledge-base routes aim at the tenant's knowledge base; the others at the agent outside the key.
            value = str(knowledge_base.pk) if name == "{id}" and "knowledge-bases" in path else value
            value = str(conversation.pk) if name == "{id}" and "conversations" in path else value
            url = url.replace(name, value)
        if path.endswith("/documents/") and method == "post":
            response = client.post(url, {"files": [SimpleUploadedFile("b.txt", b"more")]})
        else:
            response = getattr(client, method)(url, bodies.get((path, method), {}), "application/json")
        expected = {200} if path == "/api/v1/workflows/validate/" else {400, 403, 404}
        assert response.status_code in expected, (method, url, response.status_code, response.content)
        if response.status_code != 200:
            assert set(response.json()) == {"error"} and response.json()["error"]["message"], url
    assert _snapshot(tenant) == before

    refused = client.post("/api/v1/agents/", {"name": "Made by a narrow key"}, "application/json")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "permission_denied"
    assert "limited to some agents" in refused.json()["error"]["message"]
    chinese = _api(secret, "zh-hans").delete(f"/api/v1/knowledge-bases/{knowledge_base.pk}/")
    assert chinese.status_code == 403 and "仅限" in chinese.json()["error"]["message"]
    # Its own agent it may still change and publish.
    own = client.patch(f"/api/v1/agents/{published.pv.pk}/", {"description": "mine"}, "application/json")
    assert own.status_code == 200 and own.json()["description"] == "mine"
    assert client.post(f"/api/v1/agents/{published.pv.pk}/publish/").status_code == 201


# --- newcomer: one error shape ----------------------------------------------------------------------------------


def test_newcomer_rest_errors_have_one_shape_with_specific_codes_in_the_callers_language(
    tenant, tenant_admin, member, make_key, published
):
    _key, secret = make_key(tenant_admin, scopes=ALL)
    missing = {
        "agent": "/api/v1/agents/999999/",
        "conversation": "/api/v1/conversations/999999/",
        "knowledge base": "/api/v1/knowledge-bases/999999/",
        "workflow": "/api/v1/workflows/999999/",
        "plan": f"/api/v1/plans/{uuid.uuid4()}/",
    }
    for thing, url in missing.items():
        english = _api(secret).get(url)
        chinese = _api(secret, "zh-hans").get(url)
        assert english.status_code == chinese.status_code == 404, url
        assert english.json() == {"error": {"code": "not_found", "message": f"No such {thing}."}}, url
        assert chinese.json()["error"]["code"] == "not_found" and set(chinese.json()["error"]) == {"code", "message"}
        assert chinese.json()["error"]["message"].startswith("没有这个"), url
    invalid = _api(secret, "zh-hans").post("/api/v1/agents/", {}, "application/json").json()["error"]
    assert invalid["code"] == "validation_error" and set(invalid) == {"code", "message", "fields"}
    assert "name" in invalid["fields"] and invalid["message"] != "Some fields are not valid."
    _key, members = make_key(member, scopes=ALL)
    for language in ("en", "zh-hans"):
        refused = _api(members, language).post("/api/v1/agents/", {"name": "x"}, "application/json")
        assert refused.status_code == 403 and set(refused.json()) == {"error"}
        assert refused.json()["error"]["code"] == "permission_denied"
    assert refused.json()["error"]["message"] != "Only the tenant's owners and admins change this."
    unknown = _api("ak-0000000000.nope").get("/api/v1/agents/")
    assert unknown.status_code == 401 and unknown.json()["error"]["code"] == "invalid_api_key"


# --- info: JSON nested too deep -----------------------------------------------------------------------------------


def test_info_a_json_document_nested_10000_deep_fails_with_a_clear_message(
    tenant, tenant_admin, make_key, settings, tmp_path, django_capture_on_commit_callbacks
):
    settings.MEDIA_ROOT = str(tmp_path)
    _key, secret = make_key(tenant_admin, scopes=ALL)
    deep = ("[" * 10_000 + "]" * 10_000).encode()
    with tenant_scope(tenant):
        knowledge_base = knowledge_base_create(tenant=tenant, name="Deep")
    with django_capture_on_commit_callbacks(execute=True):
        uploaded = _api(secret).post(
            f"/api/v1/knowledge-bases/{knowledge_base.pk}/documents/",
            {"files": [SimpleUploadedFile("deep.json", deep)]},
        )
    assert uploaded.status_code == 201, uploaded.content
    document_id = uploaded.json()["documents"][0]["id"]
    read = _api(secret).get(f"/api/v1/knowledge-bases/{knowledge_base.pk}/documents/{document_id}/").json()
    # The ingestion's language is the platform's or the uploader's: either way the reason, not "RecursionError".
    assert read["status"] == "failed" and "64" in read["error"] and "Recursion" not in read["error"]
    for language, words in (("en", "nested more than"), ("zh-hans", "嵌套")):
        body = _api(secret, language).post("/api/v1/agents/", b"[" * 10_000, content_type="application/json")
        assert body.status_code == 400 and words in body.json()["error"]["message"]
