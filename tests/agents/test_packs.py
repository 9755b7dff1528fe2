"""Packs as tenant features (issue 18, item 1): a pack the platform operator has not enabled for a tenant is
invisible there (agent form, admin, workflow templates, planner, API) and its tools cannot be run, even from a
crafted request or configuration; seed_demo gives each demo tenant its own pack; the data migration keeps a pack
for the tenants that already used it."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps as django_apps
from django.core.management import call_command
from django.urls import reverse

from agents.models import Agent, AgentVersion, Workflow
from agents.packs.energy.demo import ECONOMICS_WORKFLOW
from agents.packs.restaurant.models import MenuItem, Order
from agents.selectors import agent_list_for_planner
from agents.services import agent_create, agent_publish, conversation_start
from agents.tools import tool_refusal, tools_available
from agents.workflows.services import workflow_save
from agents.workflows.templates import templates_for
from core.db import database_sync_to_async
from plans.services import agents_available
from tenants.models import Membership, Tenant
from tenants.packs import all_packs
from tenants.scope import all_tenants, tenant_scope
from tests.factories import TenantFactory, with_packs
from tests.llm.factories import ModelProviderFactory
from tests.turns import user_turn

pytestmark = pytest.mark.django_db

EN = {"HTTP_ACCEPT_LANGUAGE": "en"}
RESTAURANT_TOOLS = {"menu", "order", "checkout", "filter_spicy_dishes", "plugin_user_info_by_tag_get",
                    "plugin_marketing_article_generate", "plugin_sms_send"}  # fmt: skip
ENERGY_TOOLS = {"pv_economics", "pv_sensitivity", "pv_report"}
NOT_ENABLED = "belongs to the Restaurant pack, which is not enabled for this tenant"


@pytest.fixture
def restaurant(other_tenant):
    """The other tenant, with the restaurant pack enabled: what `tenant` (no pack) is compared with."""
    return with_packs(other_tenant, "restaurant")


def _provider(tenant, base_url="http://127.0.0.1:9/v1"):
    with tenant_scope(tenant):
        return ModelProviderFactory(tenant=tenant, name="scripted", base_url=base_url, is_default=True)


def _agent_form(**overrides):
    data = {
        "name": "Waiter",
        "description": "",
        "kind": "react",
        "active": "on",
        "system_prompt": "You wait tables.",
        "provider": "",
        "model": "",
        "temperature": "0.7",
        "overflow_strategy": "none",
        "overflow_preset": "",
        "overflow_max_tokens": "",
        "overflow_reserve_ratio": "0.1",
        "overflow_summary_threshold": "20",
    }
    return data | overrides


# --- the registry ----------------------------------------------------------------------------------------------


def test_the_packs_declare_themselves_and_a_new_tenant_has_none(tenant):
    assert [pack.key for pack in all_packs()] == ["energy", "restaurant"]
    assert TenantFactory(slug="brand-new").packs == []
    available = {tool.name for tool in tools_available(tenant)}
    assert not available & (RESTAURANT_TOOLS | ENERGY_TOOLS)
    assert {"http_request", "ask_user", "plugin_ai_knowledge_base_query"} <= available
    assert tool_refusal("menu", tenant=tenant).startswith(f"The tool “menu” {NOT_ENABLED}")
    assert tool_refusal("http_request", tenant=tenant) is None
    restaurant = {tool.name for tool in tools_available(with_packs(tenant, "restaurant"))}
    assert restaurant >= RESTAURANT_TOOLS and not restaurant & ENERGY_TOOLS
    assert tool_refusal("menu", tenant=tenant) is None


# --- the agent form, its crafted POST, and the API -------------------------------------------------------------


def test_the_agent_form_offers_only_the_tenants_packs(login, tenant_admin, tenant, restaurant, other_tenant_admin):
    _provider(tenant)
    _provider(restaurant)
    page = login(tenant_admin, tenant).get(reverse("agents:create"), **EN).content.decode()
    assert 'value="http_request"' in page
    for name in RESTAURANT_TOOLS | ENERGY_TOOLS:
        assert f'value="{name}"' not in page
    assert "菜单应用" not in page and "点餐应用" not in page
    theirs = login(other_tenant_admin, restaurant).get(reverse("agents:create"), **EN).content.decode()
    assert 'value="menu"' in theirs and 'value="plugin_sms_send"' in theirs and 'value="pv_economics"' not in theirs


def test_a_crafted_post_of_a_disabled_packs_tool_is_refused(login, tenant_admin, tenant):
    _provider(tenant)
    client = login(tenant_admin, tenant)
    response = client.post(reverse("agents:create"), _agent_form(tools=["ask_user", "menu"]), **EN)
    assert response.status_code == 200
    assert "Select a valid choice. menu is not one of the available choices." in response.content.decode()
    with tenant_scope(tenant):
        assert not Agent.objects.exists()
        agent = agent_create(tenant=tenant, name="Helper", kind="react", tools=["ask_user"])
    response = client.post(reverse("agents:edit", args=[agent.pk]), _agent_form(name="Helper", tools=["order"]), **EN)
    assert response.status_code == 200 and "order is not one of the available choices" in response.content.decode()
    with tenant_scope(tenant):
        agent.refresh_from_db()
    assert agent.tools == ["ask_user"]


def test_the_services_and_the_api_refuse_a_disabled_packs_tool(login, tenant_admin, tenant, restaurant):
    from django.core.exceptions import ValidationError

    with tenant_scope(tenant), pytest.raises(ValidationError) as caught:
        agent_create(tenant=tenant, name="Waiter", tools=["menu"])
    assert NOT_ENABLED in str(caught.value)
    with tenant_scope(restaurant):
        assert agent_create(tenant=restaurant, name="Waiter", tools=["menu"]).tools == ["menu"]
    client = login(tenant_admin, tenant)
    response = client.post(
        "/api/v1/agents/", {"name": "Waiter", "tools": ["menu"]}, content_type="application/json", **EN
    )
    assert response.status_code == 400
    assert NOT_ENABLED in response.content.decode()
    with tenant_scope(tenant):
        assert not Agent.objects.filter(name="Waiter").exists()


# --- the admin -------------------------------------------------------------------------------------------------


def test_a_tenant_admin_sees_a_packs_models_only_where_it_is_enabled(
    login, tenant_admin, tenant, restaurant, other_tenant_admin, superuser
):
    with tenant_scope(restaurant):
        dish = MenuItem.objects.create(tenant=restaurant, name="包子", price=3)
    client = login(tenant_admin, tenant)
    index = client.get(reverse("admin:index"), **EN).content.decode()
    assert "/admin/restaurant/" not in index and "Menu items" not in index
    for name in ("restaurant_menuitem_changelist", "restaurant_menuitem_add", "restaurant_order_changelist",
                 "restaurant_order_add"):  # fmt: skip
        assert client.get(reverse(f"admin:{name}")).status_code == 403, name
    assert client.get(reverse("admin:restaurant_menuitem_change", args=[dish.pk])).status_code in (302, 403, 404)
    # The agent admin's tools: the tenant's own.
    agent_add = client.get(reverse("admin:agents_agent_add"), **EN).content.decode()
    assert 'value="http_request"' in agent_add and 'value="menu"' not in agent_add

    theirs = login(other_tenant_admin, restaurant)
    assert "/admin/restaurant/" in theirs.get(reverse("admin:index"), **EN).content.decode()
    assert theirs.get(reverse("admin:restaurant_menuitem_changelist")).status_code == 200
    assert theirs.get(reverse("admin:restaurant_menuitem_add")).status_code == 200
    assert 'value="menu"' in theirs.get(reverse("admin:agents_agent_add"), **EN).content.decode()
    # The platform operator sees every tenant's rows.
    assert "包子" in login(superuser).get(reverse("admin:restaurant_menuitem_changelist")).content.decode()


def test_a_superuser_adding_an_agent_for_a_tenant_without_the_pack_is_refused(login, superuser, tenant):
    response = login(superuser).post(
        reverse("admin:agents_agent_add"),
        _agent_form(tenant=str(tenant.pk), tools=["menu"], **{"versions-TOTAL_FORMS": "0",
                                                               "versions-INITIAL_FORMS": "0"}),
        **EN,
    )  # fmt: skip
    assert response.status_code == 200
    assert NOT_ENABLED in response.content.decode()
    with tenant_scope(tenant):
        assert not Agent.objects.exists()


def _tenant_page(tenant, **fields) -> dict:
    """The tenant change page's POST: its fields and its members' rows as they are."""
    memberships = list(Membership.objects.filter(tenant=tenant).select_related("user").order_by("pk"))
    data = {
        "name": tenant.name,
        "memberships-TOTAL_FORMS": str(len(memberships)),
        "memberships-INITIAL_FORMS": str(len(memberships)),
        "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000",
        **fields,
    }
    for i, m in enumerate(memberships):
        data |= {f"memberships-{i}-id": str(m.pk), f"memberships-{i}-tenant": str(tenant.pk),
                 f"memberships-{i}-username": m.user.username, f"memberships-{i}-role": m.role}  # fmt: skip
    return data


def test_only_the_platform_operator_enables_packs(login, tenant_admin, tenant, superuser):
    url = reverse("admin:tenants_tenant_change", args=[tenant.pk])
    client = login(tenant_admin, tenant)
    page = client.get(url, **EN).content.decode()
    assert 'name="packs"' not in page
    response = client.post(url, _tenant_page(tenant, packs=["restaurant"]), **EN)
    assert response.status_code == 302
    tenant.refresh_from_db()
    assert tenant.packs == []

    operator = login(superuser)
    page = operator.get(url, **EN).content.decode()
    assert 'name="packs" value="restaurant"' in page and 'name="packs" value="energy"' in page
    fields = {"slug": tenant.slug, "active": "on", "monthly_token_budget": "1000", "packs": ["restaurant"]}
    response = operator.post(url, _tenant_page(tenant, **fields), **EN)
    assert response.status_code == 302, response.content.decode()[:2000]
    tenant.refresh_from_db()
    assert tenant.packs == ["restaurant"]
    changelist = operator.get(reverse("admin:tenants_tenant_changelist"), **EN).content.decode()
    assert 'class="field-enabled_packs">Restaurant<' in changelist
    # The tenant's admins now see it, read-only, by name.
    page = login(tenant_admin, tenant).get(url, **EN).content.decode()
    assert '<div class="readonly">Restaurant</div>' in page and 'name="packs"' not in page


# --- workflows ---------------------------------------------------------------------------------------------------


def test_the_workflow_templates_are_the_tenants_packs(login, tenant_admin, tenant, restaurant, other_tenant_admin):
    assert templates_for(tenant) == []
    client = login(tenant_admin, tenant)
    page = client.get(reverse("agents:workflows:list"), **EN).content.decode()
    assert "菜单推荐工作流" not in page and "客户营销工作流" not in page and "光伏经济性测算" not in page
    assert "No templates here" in page
    # Asking for the template by its key gives the empty document, not the pack's.
    crafted = client.get(reverse("agents:workflows:create") + "?template=menu_recommendation").content.decode()
    assert "filter_spicy_dishes" not in crafted
    theirs = login(other_tenant_admin, restaurant).get(reverse("agents:workflows:list"), **EN).content.decode()
    assert "菜单推荐工作流" in theirs and "客户营销工作流" in theirs and "光伏经济性测算" not in theirs


def test_a_workflow_calling_a_disabled_packs_tool_is_refused_on_save(login, tenant_admin, tenant):
    from agents.workflows.templates import template_text

    response = login(tenant_admin, tenant).post(
        reverse("agents:workflows:create"), {"yaml": template_text("customer_marketing"), "agent": ""}, **EN
    )
    assert response.status_code == 400
    assert f"The tool “plugin_sms_send” {NOT_ENABLED}" in response.content.decode()
    with tenant_scope(tenant):
        assert not Workflow.objects.exists()


# --- the planner and the run time ----------------------------------------------------------------------------------


def _publish(tenant, **fields) -> Agent:
    with tenant_scope(tenant):
        agent = agent_create(tenant=tenant, **fields)
        agent_publish(agent=agent, user=None)
        return agent


def _disable_packs(tenant) -> None:
    """What the platform operator does when a tenant should no longer have its packs."""
    Tenant.objects.filter(pk=tenant.pk).update(packs=[])
    tenant.refresh_from_db()


def test_the_planner_is_not_offered_agents_that_need_a_disabled_pack(tenant):
    with_packs(tenant, "energy")
    _publish(tenant, name="Sensitivity", description="PV sensitivity.", kind="react", tools=["pv_sensitivity"])
    economics = _publish(tenant, name="Economics", description="PV economics.", kind="workflow")
    with tenant_scope(tenant):
        workflow_save(tenant=tenant, yaml_text=ECONOMICS_WORKFLOW.read_text(encoding="utf-8"), agent=economics)
        agent_publish(agent=economics, user=None)
    _publish(tenant, name="Helper", description="Answers.", kind="chat", tools=["ask_user"])
    with tenant_scope(tenant):
        names = [row["agentName"] for row in agents_available(tenant=tenant)]
    assert names == ["Economics", "Helper", "Sensitivity"]
    _disable_packs(tenant)
    with tenant_scope(tenant):
        assert [agent.name for agent in agent_list_for_planner(tenant=tenant)] == ["Helper"]
        assert [row["agentName"] for row in agents_available(tenant=tenant)] == ["Helper"]


@pytest.mark.django_db(transaction=True)
async def test_the_runtime_refuses_a_configuration_naming_a_disabled_packs_tool(tenant, member, scripted_llm):
    def make():
        _provider(tenant, scripted_llm.base_url)
        agent = _publish(tenant, name="Waiter", kind="react", system_prompt="You wait tables.", model="gpt-4")
        with tenant_scope(tenant):
            # A crafted configuration: never through a form or a service, which would refuse it.
            version = agent.published_version()
            AgentVersion.objects.filter(pk=version.pk).update(snapshot={**version.snapshot, "tools": ["menu", "order"]})
            return conversation_start(agent=agent, user=member)

    conversation = await database_sync_to_async(make)()
    _user, reply, sink = await user_turn(tenant, conversation, "来3个包子")
    assert sink.result.status == "failed"
    assert f"The tool “menu” {NOT_ENABLED}" in reply.content and f"The tool “order” {NOT_ENABLED}" in reply.content
    assert "Admin › Tenants" in reply.content
    assert sink.types()[-2:] == ["step", "done"] and sink.of("step")[-1]["status"] == "failed"
    assert scripted_llm.requests() == []  # the model was never called, so it could not call the tool either

    def orders():
        with tenant_scope(tenant):
            return Order.objects.count()

    assert await database_sync_to_async(orders)() == 0


@pytest.mark.django_db(transaction=True)
async def test_a_workflow_agent_whose_pack_was_disabled_is_refused_before_any_step(tenant, member):
    def make():
        _provider(with_packs(tenant, "energy"))
        agent = _publish(tenant, name="Economics", kind="workflow")
        with tenant_scope(tenant):
            workflow_save(tenant=tenant, yaml_text=ECONOMICS_WORKFLOW.read_text(encoding="utf-8"), agent=agent)
            agent_publish(agent=agent, user=None)
        _disable_packs(tenant)
        with tenant_scope(tenant):
            return conversation_start(agent=agent, user=member)

    conversation = await database_sync_to_async(make)()
    _user, reply, sink = await user_turn(tenant, conversation, "地点是杭州余杭区，进行工商业光伏测算")
    assert sink.result.status == "failed"
    assert "The tool “pv_economics” belongs to the Energy pack, which is not enabled for this tenant" in reply.content
    assert sink.tools() == []  # no step ran


# --- demo data and existing data -----------------------------------------------------------------------------------


def test_seed_demo_enables_each_demo_tenants_own_pack_and_only_its_data():
    call_command("seed_demo", password="pw-for-tests-1", stdout=open("/dev/null", "w"))  # noqa: SIM115
    energy, restaurant = Tenant.objects.get(slug="energy"), Tenant.objects.get(slug="restaurant")
    assert (energy.packs, restaurant.packs) == (["energy"], ["restaurant"])
    with tenant_scope(energy):
        assert not MenuItem.objects.exists()
        assert Agent.objects.filter(name__startswith="能源规划师").exists()
    with tenant_scope(restaurant):
        assert MenuItem.objects.exists()
        assert not any(set(tools) & ENERGY_TOOLS for tools in Agent.objects.values_list("tools", flat=True))


def _migration(name: str):
    return importlib.import_module(name)


def test_the_data_migration_keeps_a_pack_for_the_tenants_that_used_it(db):
    menu_rows, sms_workflow, pv_version, _unused = (TenantFactory(slug=f"t{i}") for i in range(4))
    with tenant_scope(menu_rows):
        MenuItem.objects.create(tenant=menu_rows, name="包子", price=3)
    with_packs(sms_workflow, "restaurant")
    with tenant_scope(sms_workflow):
        from agents.workflows.templates import template_text

        workflow_save(tenant=sms_workflow, yaml_text=template_text("customer_marketing"))
    with_packs(pv_version, "energy")
    _publish(pv_version, name="Report", kind="react", tools=["pv_report"])
    with tenant_scope(pv_version):
        Agent.objects.update(tools=[])  # the draft no longer names it; the published version still does
    Tenant.objects.update(packs=[])  # as before the migration: the column was just added, empty

    with all_tenants(reason="test: as `migrate` runs data migrations (tenants.management.commands.migrate)"):
        _migration("agents.packs.restaurant.migrations.0002_enable_pack_where_used").enable(django_apps, None)
        _migration("agents.packs.energy.migrations.0001_enable_pack_where_used").enable(django_apps, None)
    packs = dict(Tenant.objects.values_list("slug", "packs"))
    assert packs == {"t0": ["restaurant"], "t1": ["restaurant"], "t2": ["energy"], "t3": []}
