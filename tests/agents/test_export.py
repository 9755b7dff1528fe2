"""Agent export and import (YAML): a round trip between two tenants, refusals, name conflicts, the pages."""

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from django.utils import translation

from agents.export import AgentImportError, agent_export, agent_import
from agents.models import Agent, Workflow
from agents.services import agent_create
from agents.workflows.services import workflow_save
from agents.workflows.templates import template_text
from tenants.scope import tenant_scope
from tests.factories import with_packs

pytestmark = pytest.mark.django_db


@pytest.fixture
def tenant(tenant):
    """Seed 1's workflows are the restaurant pack's templates: both tenants have the pack."""
    return with_packs(tenant, "restaurant")


@pytest.fixture
def other_tenant(other_tenant):
    return with_packs(other_tenant, "restaurant")


MARKETING = template_text("customer_marketing")
EN = {"HTTP_ACCEPT_LANGUAGE": "en"}


@pytest.fixture(autouse=True)
def _english():
    with translation.override("en"):
        yield


@pytest.fixture
def exported(tenant):
    with tenant_scope(tenant):
        agent = agent_create(
            tenant=tenant,
            name="营销助理",
            description="Sends offers",
            system_prompt="你是营销助理。",
            kind="workflow",
            temperature=0.3,
            token_overflow_config={"strategy": "sliding_window", "max_tokens": 4000, "reserve_ratio": 0.2},
        )
        agent.tools = ["plugin_sms_send"]
        agent.save()
        workflow_save(tenant=tenant, yaml_text=MARKETING, agent=agent)
        return agent, agent_export(agent=agent)


def test_round_trip_between_two_tenants(tenant, other_tenant, exported):
    original, text = exported
    data = yaml.safe_load(text)
    assert data["agent"]["name"] == "营销助理" and data["workflow"].strip() == MARKETING.strip()
    with tenant_scope(other_tenant):
        imported = agent_import(tenant=other_tenant, text=text)
        workflow = Workflow.objects.get(agent=imported)
        assert imported.tenant_id == other_tenant.pk
        for name in ("name", "description", "system_prompt", "kind", "temperature", "tools"):
            assert getattr(imported, name) == getattr(original, name), name
        assert imported.token_overflow_config == original.token_overflow_config
        # The YAML, comments and the seed's repeated output names included, survives unchanged.
        assert workflow.yaml.strip() == MARKETING.strip() and workflow.name == "客户营销工作流"
        assert agent_export(agent=imported) == text


def test_a_taken_name_gets_a_suffix(tenant, exported):
    _agent, text = exported
    with tenant_scope(tenant):
        again = agent_import(tenant=tenant, text=text)
        assert again.name == "营销助理 (2)"
        workflow = Workflow.objects.get(agent=again)
        assert workflow.name == "客户营销工作流 (2)" and "user_tag" in workflow.yaml


def test_unknown_tools_and_an_invalid_workflow_are_refused(other_tenant, exported):
    _agent, text = exported
    data = yaml.safe_load(text)
    data["agent"]["tools"] = ["plugin_sms_send", "no_such_tool"]
    data["workflow"] = MARKETING.replace("{user_info[mobile]}", "{ghost}")
    with tenant_scope(other_tenant), pytest.raises(AgentImportError) as caught:
        agent_import(tenant=other_tenant, text=yaml.safe_dump(data, allow_unicode=True))
    assert caught.value.errors[0] == "Unknown tools: no_such_tool."
    assert "“{ghost}” is not produced" in caught.value.errors[1] and "send_sms" in caught.value.errors[1]
    with tenant_scope(other_tenant):
        assert not Agent.objects.exists()
    with tenant_scope(other_tenant), pytest.raises(AgentImportError, match="not an agent export"):
        agent_import(tenant=other_tenant, text="version: '1.0'\n")


def test_pages_export_and_import_and_refuse_other_tenants(login, tenant, other_tenant, other_tenant_admin, exported):
    agent, _text = exported
    client = login(other_tenant_admin, other_tenant)
    assert client.get(reverse("agents:workflows:agent_export", args=[agent.pk])).status_code == 404
    mine = login(other_tenant_admin, tenant)  # not a member of `tenant`: no access to its agents either
    assert mine.get(reverse("agents:workflows:agent_export", args=[agent.pk])).status_code in (403, 404)


def test_import_page_round_trip(login, tenant, tenant_admin, other_tenant, other_tenant_admin, member, exported):
    agent, _text = exported
    client = login(tenant_admin, tenant)
    response = client.get(reverse("agents:workflows:agent_export", args=[agent.pk]))
    assert response.status_code == 200 and "attachment" in response["Content-Disposition"]
    assert b'id="export-agent"' in client.get(reverse("agents:detail", args=[agent.pk])).content
    client = login(other_tenant_admin, other_tenant)
    assert b'id="agent-import"' in client.get(reverse("agents:list")).content
    upload = SimpleUploadedFile("a.agent.yaml", response.content)
    response = client.post(reverse("agents:workflows:agent_import"), {"file": upload})
    assert response.status_code == 302
    with tenant_scope(other_tenant):
        imported = Agent.objects.get()
    assert response["Location"] == reverse("agents:detail", args=[imported.pk])
    bad = SimpleUploadedFile("b.yaml", b"format: agent-platform/agent\nagent: {name: x, tools: [nope]}\n")
    response = client.post(reverse("agents:workflows:agent_import"), {"file": bad}, follow=True, **EN)
    assert "Unknown tools: nope." in response.content.decode()
    member_client = login(member, tenant)
    upload = SimpleUploadedFile("a.agent.yaml", b"x")
    assert member_client.post(reverse("agents:workflows:agent_import"), {"file": upload}).status_code == 403
