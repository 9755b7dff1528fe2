"""Every URL route of the project (pages, admin, REST API, OpenAI-compatible endpoint), called by a tenant's admin
(session) and with a tenant's API key (every scope), with another tenant's object ids: 403/404/405 or a redirect
away, never that tenant's data, and nothing of that tenant changes.

Routes are read from the URL resolver, so a new route is enumerated without touching this test; a route with a
parameter this test cannot fill fails it (add the parameter to `foreign_value`)."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from django.apps import apps
from django.contrib import admin
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from agents.goal.services import goal_run_start
from agents.services import agent_create, agent_publish, conversation_start
from agents.workflows.services import workflow_run_record, workflow_save
from api.keys import key_create
from api.models import KeyScope
from evals.models import CaseResult, ResultStatus, Run
from evals.services import case_create, dataset_create
from knowledge.services import document_add, knowledge_base_create
from memory.attachments import Upload, attachment_upload
from memory.feedback import feedback_record
from memory.longterm import metrics as memory_metrics
from memory.longterm.recall import turn_index
from memory.services import message_add
from plans import services as plan_services
from plans.models import StepRecord
from tenants.models import Membership, Role, TenantOwned
from tenants.scope import all_tenants, tenant_scope
from tests.agents.factories import echo_workflow_yaml
from tests.factories import MembershipFactory, UserFactory
from tests.llm.factories import ModelProviderFactory
from tests.memory.memory_data import remember_story
from toolservers.models import ServerTool, ToolServer
from widget.models import EmbedToken

pytestmark = pytest.mark.django_db

MARK = "FOREIGNMARK"
WORKFLOW = echo_workflow_yaml(f"{MARK} workflow", description=MARK)
ALLOWED = {301, 302, 400, 401, 403, 404, 405}
# Routes that end the session under test (they hold no tenant data).
SKIPPED = {"/accounts/logout/", "/admin/logout/"}


def _walk(patterns: list[Any], prefix: str = "") -> list[tuple[str, URLPattern]]:
    routes = []
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            routes += _walk(pattern.url_patterns, prefix + str(pattern.pattern))
        else:
            routes.append((prefix + str(pattern.pattern), pattern))
    return routes


@pytest.fixture
def foreign(other_tenant, settings, tmp_path):
    """Another tenant with one of everything, each carrying MARK."""
    settings.MEDIA_ROOT = str(tmp_path)
    settings.KNOWLEDGE_INGEST_IN_THREAD = False
    with tenant_scope(other_tenant):
        owner = UserFactory(username=f"{MARK.lower()}-owner")
        MembershipFactory(tenant=other_tenant, user=owner, role=Role.OWNER)
        ModelProviderFactory(tenant=other_tenant, name=f"{MARK} provider", is_default=True)
        agent = agent_create(tenant=other_tenant, name=f"{MARK} agent", description=MARK, system_prompt=MARK)
        agent_publish(agent=agent, user=None)
        planner = agent_create(tenant=other_tenant, name=f"{MARK} planner", kind="planner")
        conversation = conversation_start(agent=agent, user=owner, title=MARK)
        question = message_add(conversation=conversation, role="user", content=f"{MARK} secret question")
        answer = message_add(conversation=conversation, role="assistant", content=f"{MARK} secret answer")
        embed = EmbedToken.objects.create(
            tenant=other_tenant, agent=agent, name=f"{MARK} embed", allowed_origins="http://testserver"
        )
        workflow = workflow_save(tenant=other_tenant, yaml_text=WORKFLOW)
        run = workflow_run_record(
            workflow=workflow, status="completed", inputs={"q": MARK}, outputs={"a": MARK}, log=[]
        )
        knowledge_base = knowledge_base_create(tenant=other_tenant, name=f"{MARK} kb")
        document = document_add(knowledge_base=knowledge_base, name=f"{MARK}.txt", content=MARK.encode(), queue=False)
        plan_conversation = conversation_start(agent=planner, user=owner)
        plan = plan_services.plan_create(
            conversation=plan_conversation, name=MARK, user_query=MARK, allow_concurrency=False,
            steps=[{"seqNo": 0, "agentName": agent.name, "requirement": MARK}],
        )  # fmt: skip
        record = StepRecord.objects.create(tenant=other_tenant, step=plan.steps.get(), content=MARK)
        key, _secret = key_create(tenant=other_tenant, user=owner, name=f"{MARK} key")
        memory = remember_story(user=owner, agent_id=agent.pk, word=f" {MARK}")
        turn_index(conversation, user_message=question, reply=None)
        memory_metrics.count(agent_id=agent.pk, extractions=1)
        goal_agent = agent_create(tenant=other_tenant, name=f"{MARK} goal agent", kind="goal")
        goal_run = goal_run_start(agent=goal_agent, user=owner, goal=MARK, queue=False)
        mcp_server = ToolServer.objects.create(tenant=other_tenant, name=f"{MARK} mcp", slug="foreign",
                                               url="https://mcp.example.com/mcp")  # fmt: skip
        ServerTool.objects.create(tenant=other_tenant, server=mcp_server, name=MARK, function_name="mcp__foreign__x",
                                  description=MARK, refreshed_at=mcp_server.created_at)  # fmt: skip
        settings.ATTACHMENT_STORAGE_ROOT = str(tmp_path / "attachments")
        upload = Upload(f"{MARK}.txt", MARK.encode())
        attachment = attachment_upload(user=owner, upload=upload, conversation=conversation)
        eval_dataset = dataset_create(agent=agent, name=f"{MARK} dataset", description=MARK)
        eval_case = case_create(dataset=eval_dataset, title=MARK, turns=[MARK],
                                expectations=[{"kind": "contains", "text": MARK}])  # fmt: skip
        eval_run = Run.objects.create(tenant=other_tenant, dataset=eval_dataset, agent=agent, total=1)
        CaseResult.objects.create(tenant=other_tenant, run=eval_run, case=eval_case, title=MARK,
                                  status=ResultStatus.PASSED, reply=MARK)  # fmt: skip
        feedback = feedback_record(message=answer, user=owner, rating=-1, comment=MARK, source="chat")
    return {
        "agent": agent, "conversation": conversation, "workflow": workflow, "run": run,
        "knowledge_base": knowledge_base, "document": document, "plan": plan, "record": record, "key": key,
        "membership": Membership.objects.get(user=owner, tenant=other_tenant), "tenant": other_tenant, "user": owner,
        "memory": memory,
        "goal_run": goal_run, "answer": answer, "embed": embed, "attachment": attachment,
        "eval_dataset": eval_dataset, "eval_case": eval_case, "eval_run": eval_run, "feedback": feedback,
    }  # fmt: skip


def _snapshot(tenant) -> dict[str, list]:
    """Every row of `tenant` in every tenant-owned table (and its memberships), to compare before and after."""
    rows = {"memberships": list(Membership.objects.filter(tenant=tenant).values())}
    with all_tenants(reason="test compares the foreign tenant's rows"):
        for model in apps.get_models():
            if issubclass(model, TenantOwned):
                rows[model._meta.label] = list(model._base_manager.filter(tenant=tenant).order_by("pk").values())
    for label in ("api.ApiKey",):  # written on use, by design; the rest must not move
        for row in rows.get(label, []):
            row.pop("last_used_at", None)
    return rows


def foreign_value(name: str, route: str, world: dict[str, Any]) -> str:
    """The other tenant's object for a URL parameter."""
    simple = {
        "agent_id": world["agent"].pk, "workflow_id": world["workflow"].pk, "run_id": world["run"].pk,
        "conversation_id": world["conversation"].pk, "knowledge_base_id": world["knowledge_base"].pk,
        "document_id": world["document"].pk, "key_id": world["key"].pk, "record_id": world["record"].recordId,
        "plan_id": world["plan"].planId, "planId": world["plan"].planId, "format": "json",
        "event_id": world["memory"].delayed.pk, "item_id": world["memory"].memory.pk,
        "goal_run_id": world["goal_run"].pk, "model_id": world["agent"].slug, "message_id": world["answer"].pk,
        "token": world["embed"].token, "attachment_id": world["attachment"].pk,
        "dataset_id": world["eval_dataset"].pk, "case_id": world["eval_case"].pk, "eval_run_id": world["eval_run"].pk,
    }  # fmt: skip
    if name in simple:
        return str(simple[name])
    if name == "pk":
        for resource, key in (("conversations", "conversation"), ("knowledge-bases", "knowledge_base"),
                              ("workflows", "workflow"), ("agents", "agent"),
                              ("attachments", "attachment"), ("eval-datasets", "eval_dataset"),
                              ("eval-cases", "eval_case"), ("eval-runs", "eval_run"),
                              ("feedback", "feedback")):  # fmt: skip
            if f"^{resource}/" in route:
                return str(world[key].pk)
    raise AssertionError(f"route {route}: no foreign value for parameter <{name}>; teach foreign_value()")


def _url(route: str, pattern: URLPattern, world: dict[str, Any]) -> str | None:
    """The route with every parameter filled with the other tenant's object; None for patterns that match any path
    (static files, the admin's catch-all)."""
    if "<path:" in route or "(?P<url>" in route:
        return None
    url = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: foreign_value(m.group(1), route, world), route)
    url = re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda m: foreign_value(m.group(1), route, world), url)
    url = url.replace("^", "").replace("$", "").replace("\\.", ".").replace("/?", "/")
    return "/" + url


def _admin_urls(world: dict[str, Any]) -> list[str]:
    """The admin's change, delete and history pages of the other tenant's row of every registered model."""
    urls = []
    with all_tenants(reason="test finds the foreign rows"):
        for model in admin.site._registry:
            if issubclass(model, TenantOwned):
                row = model._base_manager.filter(tenant=world["tenant"]).first()
            elif model._meta.label == "tenants.Tenant":
                row = world["tenant"]
            elif model._meta.label == "tenants.Membership":
                row = world["membership"]
            elif model._meta.label == "auth.User":
                row = world["user"]
            else:
                row = None
            if row is None:
                continue
            info = model._meta.app_label, model._meta.model_name
            for action in ("change", "delete", "history"):
                urls.append(f"/admin/{info[0]}/{info[1]}/{row.pk}/{action}/")
    return urls


def _check(client: Client, url: str, method: str, who: str, foreign_id: bool = True) -> None:
    response = getattr(client, method)(url)
    body = b"".join(response.streaming_content) if response.streaming else response.content
    assert MARK.encode() not in body, f"{who} {method.upper()} {url}: the other tenant's data in the answer"
    if response.status_code in (200, 201) and (method == "get" or not foreign_id):
        return  # a page of one's own tenant (a list, a form, its own new object) that shows nothing foreign
    assert response.status_code in ALLOWED, f"{who} {method.upper()} {url}: {response.status_code}"


def test_every_route_refuses_another_tenants_objects(tenant, tenant_admin, foreign, client):
    with tenant_scope(tenant):
        ModelProviderFactory(tenant=tenant, name="mine", is_default=True)
        _key, secret = key_create(tenant=tenant, user=tenant_admin, name="mine", scopes=list(KeyScope.values))
    before = _snapshot(foreign["tenant"])
    client.force_login(tenant_admin)
    session = client.session
    session["active_tenant_id"] = tenant.pk
    session.save()
    keyed = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")

    routes = _walk(get_resolver().url_patterns)
    pages = [(route, pattern) for route, pattern in routes if not route.startswith("admin/")]
    urls = sorted({url for route, pattern in pages if (url := _url(route, pattern, foreign))})
    assert len(urls) > 30 and "/v1/chat/completions" in urls
    for url in (u for u in urls if u not in SKIPPED):
        foreign_id = bool(re.search(r"/(\d+|[0-9a-f-]{36})/", url))
        for method in ("get", "post"):
            _check(client, url, method, "session", foreign_id)
            if url.startswith(("/api/v1/", "/v1/")):
                _check(keyed, url, method, "key", foreign_id)
        if url.startswith("/api/v1/") and re.search(r"/\d+/", url):
            for method in ("put", "patch", "delete"):
                _check(keyed, url, method, "key")
    admin_urls = _admin_urls(foreign)
    assert any("/agents/agent/" in u for u in admin_urls) and any("/api/apikey/" in u for u in admin_urls)
    for url in admin_urls:
        for method in ("get", "post"):
            _check(client, url, method, "admin")
    assert _snapshot(foreign["tenant"]) == before


def test_the_openai_endpoint_refuses_another_tenants_agent_and_conversation(tenant, tenant_admin, foreign):
    with tenant_scope(tenant):
        _key, secret = key_create(tenant=tenant, user=tenant_admin, name="mine", scopes=list(KeyScope.values))
    keyed = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    for body, header in (
        ({"model": foreign["agent"].slug, "messages": [{"role": "user", "content": "hi"}]}, {}),
        ({"model": foreign["agent"].slug, "messages": [{"role": "user", "content": "hi"}]},
         {"HTTP_X_CONVERSATION_ID": str(foreign["conversation"].pk)}),
    ):  # fmt: skip
        response = keyed.post("/v1/chat/completions", body, "application/json", **header)
        assert response.status_code == 404 and MARK.encode() not in response.content
    models = keyed.get("/v1/models").json()
    assert foreign["agent"].slug not in [m["id"] for m in models["data"]]


def test_a_plain_member_is_refused_too(tenant, member, foreign, client):
    """A member without administration rights gets no more than an administrator."""
    client.force_login(member)
    session = client.session
    session["active_tenant_id"] = tenant.pk
    session.save()
    for url in (f"/chat/{foreign['conversation'].pk}/", f"/agents/{foreign['agent'].pk}/",
                f"/api/v1/conversations/{foreign['conversation'].pk}/messages/",
                f"/plans/{foreign['plan'].planId}/log/", f"/plans/records/{foreign['record'].recordId}/"):  # fmt: skip
        _check(client, url, "get", "member")


def test_unknown_parameters_are_reported(foreign):
    with pytest.raises(AssertionError, match="teach foreign_value"):
        foreign_value("gadget_id", "x/<int:gadget_id>/", foreign)
    assert uuid.UUID(foreign_value("plan_id", "plans/<uuid:plan_id>/log/", foreign))
