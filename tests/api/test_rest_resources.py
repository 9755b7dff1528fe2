"""The REST API's other resources: agent writes, export and import; knowledge bases, several-file uploads, ingestion
status, search, deletion; plans and their log; usage; stop. Administrators write; members and narrow keys are
refused with the one error shape."""

from __future__ import annotations

import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from agents.services import conversation_start
from api.models import KeyScope
from knowledge.models import Document
from plans import services as plan_services
from tenants.scope import tenant_scope
from tests.agents.factories import echo_workflow_yaml
from tests.llm.factories import LLMCallFactory

pytestmark = pytest.mark.django_db

ALL = list(KeyScope.values)


def _api(secret: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}")


def test_an_administrator_creates_changes_publishes_and_copies_an_agent(published, tenant_admin, make_key):
    _key, secret = make_key(tenant_admin, scopes=ALL)
    client = _api(secret)
    created = client.post(
        "/api/v1/agents/", {"name": "报价助手", "system_prompt": "Quote.", "tools": ["deep_think"]}, "application/json"
    )
    assert created.status_code == 201, created.content
    agent = created.json()
    assert agent["slug"] == "报价助手" and agent["published_version"] is None and agent["tools"] == ["deep_think"]
    changed = client.patch(f"/api/v1/agents/{agent['id']}/", {"temperature": 0.2}, "application/json")
    assert changed.status_code == 200 and changed.json()["temperature"] == 0.2
    assert client.post(f"/api/v1/agents/{agent['id']}/publish/").json()["number"] == 1
    exported = client.get(f"/api/v1/agents/{agent['id']}/export/").json()
    assert "报价助手" in exported["yaml"] and exported["filename"].endswith(".yaml")
    copy = client.post("/api/v1/agents/import/", {"yaml": exported["yaml"]}, "application/json")
    assert copy.status_code == 201 and copy.json()["name"] != "报价助手" and copy.json()["temperature"] == 0.2


def test_agent_input_errors_name_the_field(published, tenant_admin, make_key):
    _key, secret = make_key(tenant_admin, scopes=ALL)
    client = _api(secret)
    unknown_tool = client.post("/api/v1/agents/", {"name": "x", "tools": ["no_such_tool"]}, "application/json")
    assert unknown_tool.status_code == 400 and "tools" in unknown_tool.json()["error"]["fields"]
    taken = client.post("/api/v1/agents/", {"name": "Solar advisor"}, "application/json")
    assert taken.status_code == 400
    not_yaml = client.post("/api/v1/agents/import/", {"yaml": "a: [b"}, "application/json")
    assert not_yaml.status_code == 400 and "yaml" in not_yaml.json()["error"]["fields"]


def test_members_read_but_do_not_write(published, member, make_key):
    _key, secret = make_key(member, scopes=ALL)
    client = _api(secret)
    assert client.get("/api/v1/agents/").status_code == 200
    refused = client.post("/api/v1/agents/", {"name": "mine"}, "application/json")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "permission_denied"
    assert client.post("/api/v1/knowledge-bases/", {"name": "kb"}, "application/json").status_code == 403
    assert client.get("/api/v1/usage/").status_code == 403


def test_knowledge_base_upload_status_search_and_delete(tenant, tenant_admin, make_key, settings, tmp_path,
                                                        django_capture_on_commit_callbacks):  # fmt: skip
    settings.MEDIA_ROOT = str(tmp_path)
    _key, secret = make_key(tenant_admin, scopes=ALL)
    client = _api(secret)
    created = client.post("/api/v1/knowledge-bases/", {"name": "光伏手册", "chunk_size": 60, "chunk_overlap": 10},
                          "application/json")  # fmt: skip
    assert created.status_code == 201, created.content
    kb = created.json()["id"]
    files = [
        SimpleUploadedFile(
            "inverter.md", "# Inverter\n\nThe inverter turns DC into AC. 逆变器把直流电变成交流电。".encode()
        ),
        SimpleUploadedFile("tariff.txt", b"The feed-in tariff is paid per kWh exported to the grid."),
        SimpleUploadedFile("virus.exe", b"MZ"),
    ]
    with django_capture_on_commit_callbacks(execute=True):
        uploaded = client.post(f"/api/v1/knowledge-bases/{kb}/documents/", {"files": files})
    assert uploaded.status_code == 201, uploaded.content
    body = uploaded.json()
    assert sorted(d["name"] for d in body["documents"]) == ["inverter.md", "tariff.txt"]
    assert len(body["errors"]) == 1 and "virus.exe" in body["errors"][0]
    listed = client.get(f"/api/v1/knowledge-bases/{kb}/documents/").json()["results"]
    assert {d["status"] for d in listed} == {"ready"} and all(d["chunk_count"] >= 1 for d in listed)
    hits = client.get(f"/api/v1/knowledge-bases/{kb}/search/", {"q": "feed-in tariff", "mode": "keyword"}).json()
    assert hits[0]["document_name"] == "tariff.txt"
    bad = client.get(f"/api/v1/knowledge-bases/{kb}/search/", {"q": "", "top_k": "900"})
    assert bad.status_code == 400 and set(bad.json()["error"]["fields"]) == {"q", "top_k"}
    tariff = next(d for d in listed if d["name"] == "tariff.txt")
    assert client.get(f"/api/v1/knowledge-bases/{kb}/documents/{tariff['id']}/").json()["status"] == "ready"
    assert client.delete(f"/api/v1/knowledge-bases/{kb}/documents/{tariff['id']}/").status_code == 204
    with tenant_scope(tenant):
        assert list(Document.objects.values_list("name", flat=True)) == ["inverter.md"]
    nothing = client.post(f"/api/v1/knowledge-bases/{kb}/documents/", {"files": [SimpleUploadedFile("e.exe", b"x")]})
    assert nothing.status_code == 400 and nothing.json()["error"]["code"] == "validation_error"
    assert client.delete(f"/api/v1/knowledge-bases/{kb}/").status_code == 204
    assert client.get(f"/api/v1/knowledge-bases/{kb}/").status_code == 404


def test_plans_are_read_by_their_owner_and_logged_for_administrators(tenant, member, tenant_admin, make_key,
                                                                     published):  # fmt: skip
    with tenant_scope(tenant):
        conversation = conversation_start(agent=published.solar, user=member)
        plan = plan_services.plan_create(
            conversation=conversation, name="PV study", user_query="How big?", allow_concurrency=False,
            steps=[{"seqNo": 0, "agentName": "Solar advisor", "requirement": "size it"}],
        )  # fmt: skip
        plan_services.plan_log(plan=plan, kind="tool_call", step=0, data={"name": "pv_calc"})
        other_conversation = conversation_start(agent=published.solar, user=tenant_admin)
        theirs = plan_services.plan_create(
            conversation=other_conversation, name="Admin's", user_query="q", allow_concurrency=False,
            steps=[{"seqNo": 0, "agentName": "Solar advisor", "requirement": "r"}],
        )  # fmt: skip
    _key, members = make_key(member)
    client = _api(members)
    assert [p["planId"] for p in client.get("/api/v1/plans/").json()["results"]] == [str(plan.planId)]
    read = client.get(f"/api/v1/plans/{plan.planId}/").json()
    assert read["steps"][0]["requirement"] == "size it" and read["status"] == "running"
    assert client.get(f"/api/v1/plans/{theirs.planId}/").status_code == 404
    assert client.get(f"/api/v1/plans/{plan.planId}/log/").status_code == 403
    _key, admins = make_key(tenant_admin)
    log = _api(admins).get(f"/api/v1/plans/{plan.planId}/log/").json()["results"]
    assert [row["data"]["name"] for row in log if row["kind"] == "tool_call"] == ["pv_calc"]
    assert _api(members).post(f"/api/v1/plans/{plan.planId}/stop/").json() == {"stopped": False}


def test_usage_counts_tokens_per_day_and_model(tenant, other_tenant, tenant_admin, make_key):
    with tenant_scope(tenant):
        LLMCallFactory(tenant=tenant, model="gpt-4", prompt_tokens=10, completion_tokens=5, total_tokens=15)
        LLMCallFactory(tenant=tenant, model="gpt-4", prompt_tokens=1, completion_tokens=1, total_tokens=2)
    with tenant_scope(other_tenant):
        LLMCallFactory(tenant=other_tenant, model="gpt-4", prompt_tokens=999, completion_tokens=1, total_tokens=1000)
    _key, secret = make_key(tenant_admin)
    rows = _api(secret).get("/api/v1/usage/", {"days": "7"}).json()
    assert [(r["model"], r["calls"], r["total_tokens"]) for r in rows] == [("gpt-4", 2, 17)]
    assert _api(secret).get("/api/v1/usage/", {"days": "0"}).status_code == 400


def test_stop_without_a_running_reply_says_so(published, member, make_key, tenant):
    with tenant_scope(tenant):
        conversation = conversation_start(agent=published.solar, user=member)
    _key, secret = make_key(member)
    response = _api(secret).post(f"/api/v1/conversations/{conversation.pk}/stop/")
    assert response.status_code == 200 and response.json() == {"stopped": False}


WORKFLOW = echo_workflow_yaml("Echo flow")


def test_workflows_validate_list_and_runs_keep_members_apart(tenant, member, tenant_admin, make_key, published):
    from agents.workflows.services import workflow_run_record, workflow_save
    from tests.factories import MembershipFactory

    other_member = MembershipFactory(tenant=tenant).user
    with tenant_scope(tenant):
        workflow = workflow_save(tenant=tenant, yaml_text=WORKFLOW)
        mine = conversation_start(agent=published.solar, user=member)
        theirs = conversation_start(agent=published.solar, user=other_member)
        workflow_run_record(workflow=workflow, status="completed", inputs={"question": "my question"}, outputs={},
                            log=[], conversation_id=mine.pk)  # fmt: skip
        workflow_run_record(workflow=workflow, status="completed", inputs={"question": "their secret"}, outputs={},
                            log=[], conversation_id=theirs.pk)  # fmt: skip
    _key, secret = make_key(member, scopes=[KeyScope.READ])
    client = _api(secret)
    assert [w["name"] for w in client.get("/api/v1/workflows/").json()["results"]] == ["Echo flow"]
    runs = client.get(f"/api/v1/workflows/{workflow.pk}/runs/").json()["results"]
    assert [run["inputs"]["question"] for run in runs] == ["my question"]
    _key, admins = make_key(tenant_admin)
    assert len(_api(admins).get(f"/api/v1/workflows/{workflow.pk}/runs/").json()["results"]) == 2
    broken = client.post("/api/v1/workflows/validate/", {"yaml": WORKFLOW.replace("type: 'input'", "type: 'nope'")},
                         "application/json").json()  # fmt: skip
    assert broken["valid"] is False and broken["errors"][0]["step"] == "start" and broken["errors"][0]["line"]
    assert client.post("/api/v1/workflows/validate/", {"yaml": WORKFLOW}, "application/json").json()["valid"] is True


def test_newcomer_a_plan_and_its_steps_are_camel_case_in_the_api_and_the_schema(tenant, tenant_admin, make_key,
                                                                                 published):  # fmt: skip
    from drf_spectacular.generators import SchemaGenerator

    with tenant_scope(tenant):
        conversation = conversation_start(agent=published.solar, user=tenant_admin)
        plan = plan_services.plan_create(
            conversation=conversation, name="PV", user_query="How big?", allow_concurrency=True,
            steps=[{"seqNo": 1, "agentName": "Solar advisor", "requirement": "size it"},
                   {"seqNo": 2, "agentName": "Solar advisor", "requirement": "price it", "depends_on": [1]}],
        )  # fmt: skip
    _key, secret = make_key(tenant_admin)
    read = _api(secret).get(f"/api/v1/plans/{plan.planId}/").json()
    camel = re.compile(r"^[a-z]+(?:[A-Z][a-z]+)*$")
    assert set(read) == {"planId", "name", "userQuery", "status", "allowConcurrency", "conversation", "steps",
                         "createdAt", "updatedAt"}  # fmt: skip
    assert read["allowConcurrency"] is True and read["userQuery"] == "How big?"
    assert [step["seqNo"] for step in read["steps"]] == [1, 2] and read["steps"][1]["dependsOn"] == [1]
    assert all(camel.match(name) for name in [*read, *read["steps"][0]])
    components = SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]
    assert set(components["Plan"]["properties"]) == set(read)
    assert set(components["PlanStep"]["properties"]) == set(read["steps"][0])
