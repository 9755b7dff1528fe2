"""The agent admin: readable token-overflow fields, publish action, versions inline, tenant isolation (T3)."""

import pytest
from django.urls import reverse

from agents.models import Agent
from agents.services import agent_publish
from tenants.scope import all_tenants, tenant_scope

pytestmark = pytest.mark.django_db


def _form(**overrides):
    data = {
        "name": "Menu planner",
        "description": "Plans menus.",
        "kind": "chat",
        "active": "on",
        "system_prompt": "Plan menus.",
        "model": "",
        "temperature": "0.7",
        "overflow_strategy": "sliding_window",
        "overflow_max_tokens": "8000",
        "overflow_reserve_ratio": "0.1",
        "overflow_summary_threshold": "20",
        "versions-TOTAL_FORMS": "0",
        "versions-INITIAL_FORMS": "0",
    }
    data.update(overrides)
    return data


def test_overflow_config_is_edited_as_fields_and_errors_sit_next_to_the_field(login, tenant_admin, tenant, agents):
    client = login(tenant_admin, tenant)
    page = client.get(reverse("admin:agents_agent_add")).content.decode()
    assert 'name="overflow_strategy"' in page and 'name="overflow_max_tokens"' in page
    assert 'name="token_overflow_config"' not in page

    response = client.post(reverse("admin:agents_agent_add"), _form(overflow_max_tokens=""))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "overflow_max_tokens" in errors

    response = client.post(reverse("admin:agents_agent_add"), _form())
    assert response.status_code == 302
    with tenant_scope(tenant):
        agent = Agent.objects.get(name="Menu planner")
    assert agent.tenant_id == tenant.pk
    assert agent.token_overflow_config["strategy"] == "sliding_window"
    assert agent.token_overflow_config["max_tokens"] == 8000

    page = client.get(reverse("admin:agents_agent_change", args=[agent.pk])).content.decode()
    assert 'value="8000"' in page


def test_publish_action_creates_a_version_shown_inline(login, tenant_admin, tenant, agents):
    client = login(tenant_admin, tenant)
    mine = agents["mine"]
    response = client.post(
        reverse("admin:agents_agent_changelist"), {"action": "publish", "_selected_action": [mine.pk]}
    )
    assert response.status_code == 302
    with tenant_scope(tenant):
        assert mine.published_version().number == 1
    page = client.get(reverse("admin:agents_agent_change", args=[mine.pk])).content.decode()
    assert "Solar advisor" in page


def test_tenant_admin_cannot_see_or_touch_another_tenants_agent(login, tenant_admin, tenant, agents):
    client = login(tenant_admin, tenant)
    theirs = agents["theirs"]
    listing = client.get(reverse("admin:agents_agent_changelist")).content.decode()
    assert "Solar advisor" in listing and "Noodle chef" not in listing
    for name in ("agents_agent_change", "agents_agent_delete"):
        response = client.get(reverse(f"admin:{name}", args=[theirs.pk]), follow=True)
        assert response.redirect_chain
        assert "Noodle chef" not in response.content.decode()
    client.post(reverse("admin:agents_agent_changelist"), {"action": "publish", "_selected_action": [theirs.pk]})
    client.post(reverse("admin:agents_agent_change", args=[theirs.pk]), _form(name="Hijacked"))
    with all_tenants(reason="test: the other tenant's agent is untouched"):
        theirs.refresh_from_db()
        assert theirs.name == "Noodle chef"
        assert not theirs.versions.exists()


def test_platform_superuser_sees_every_tenants_agents(login, superuser, tenant, agents):
    client = login(superuser, tenant)
    with tenant_scope(tenant):
        agent_publish(agent=agents["mine"], user=superuser)
    listing = client.get(reverse("admin:agents_agent_changelist")).content.decode()
    assert "Solar advisor" in listing and "Noodle chef" in listing
    theirs = agents["theirs"]
    client.post(reverse("admin:agents_agent_changelist"), {"action": "publish", "_selected_action": [theirs.pk]})
    with tenant_scope(theirs.tenant):
        version = theirs.published_version()
    assert (version.number, version.tenant_id, version.published_by) == (1, theirs.tenant_id, superuser)


def test_tools_and_knowledge_bases_are_chosen_in_the_tenant_only(login, tenant_admin, tenant, other_tenant, agents):
    from knowledge.services import knowledge_base_create

    with tenant_scope(tenant):
        own = knowledge_base_create(tenant=tenant, name="Menu")
    with tenant_scope(other_tenant):
        foreign = knowledge_base_create(tenant=other_tenant, name="Secret recipes")
    client = login(tenant_admin, tenant)
    page = client.get(reverse("admin:agents_agent_add")).content.decode()
    assert f'value="{own.pk}"' in page and "Secret recipes" not in page

    response = client.post(reverse("admin:agents_agent_add"), _form(knowledge_bases=[foreign.pk]))
    assert response.status_code == 200 and "knowledge_bases" in response.context["adminform"].form.errors

    response = client.post(reverse("admin:agents_agent_add"), _form(knowledge_bases=[own.pk], tools=["ask_user"]))
    assert response.status_code == 302
    with tenant_scope(tenant):
        agent = Agent.objects.get(name="Menu planner")
        assert list(agent.knowledge_bases.all()) == [own] and agent.tools == ["ask_user"]
