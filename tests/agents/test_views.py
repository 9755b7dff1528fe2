"""The agent pages: create and edit with the token-management fields, publish, metrics, roles and tenant isolation."""

import datetime as dt

import pytest
from django.core.management import call_command
from django.urls import NoReverseMatch, include, path, reverse

from agents.models import Agent, AgentVersion
from agents.services import agent_publish, conversation_start
from memory.models import OverflowMetric
from tenants.models import Role, Tenant
from tenants.scope import tenant_scope
from tests.agents.factories import AgentFactory
from tests.factories import MembershipFactory, UserFactory
from tests.llm.factories import ModelProviderFactory

pytestmark = pytest.mark.django_db

EN = {"HTTP_ACCEPT_LANGUAGE": "en"}


@pytest.fixture
def provider(tenant):
    with tenant_scope(tenant):
        return ModelProviderFactory(
            tenant=tenant,
            name="Tenant OpenAI",
            is_default=True,
            chat_models=[
                {"name": "gpt-4", "context_window": 8192, "function_calling": True},
                {"name": "gpt-4o", "context_window": 128000, "function_calling": True},
            ],
            default_chat_model="gpt-4",
        )


def _form(**overrides):
    data = {
        "name": "Grid helper",
        "description": "Explains the grid.",
        "kind": "chat",
        "active": "on",
        "system_prompt": "Explain the grid.",
        "provider": "",
        "model": "",
        "temperature": "0.7",
        "overflow_strategy": "sliding_window",
        "overflow_preset": "",
        "overflow_max_tokens": "8192",
        "overflow_reserve_ratio": "0.1",
        "overflow_summary_threshold": "20",
    }
    data.update(overrides)
    return data


def test_create_with_the_sliding_window_through_the_form(login, tenant_admin, tenant, provider):
    client = login(tenant_admin, tenant)
    page = client.get(reverse("agents:create"), **EN).content.decode()
    # Seed 4, 7.3: three radio buttons, each with its explanation, and the presets.
    assert page.count('name="overflow_strategy"') == 3
    assert "Removes old messages automatically and keeps the newest content." in page
    assert "GPT-4 (8K)" in page and "Qwen (128K)" in page
    assert 'data-strategies="summarize"' in page  # the threshold belongs to summarize only
    assert 'value="gpt-4o"' in page  # the tenant's models are suggested

    response = client.post(reverse("agents:create"), _form(provider=str(provider.pk), model="gpt-4"), **EN)
    assert response.status_code == 302
    with tenant_scope(tenant):
        agent = Agent.objects.get(name="Grid helper")
        assert not agent.versions.exists()  # saving keeps a draft
    assert response.url == reverse("agents:detail", args=[agent.pk])
    assert agent.tenant_id == tenant.pk
    assert agent.provider_id == provider.pk
    assert agent.token_overflow_config == {
        "strategy": "sliding_window",
        "max_tokens": 8192,
        "reserve_ratio": 0.1,
        "summary_threshold": 20,
    }


def test_without_javascript_a_preset_fills_an_empty_maximum(login, tenant_admin, tenant, provider):
    client = login(tenant_admin, tenant)
    response = client.post(reverse("agents:create"), _form(overflow_max_tokens="", overflow_preset="gpt-3.5-4k"), **EN)
    assert response.status_code == 302
    with tenant_scope(tenant):
        assert Agent.objects.get(name="Grid helper").token_overflow_config["max_tokens"] == 4096


@pytest.mark.parametrize(
    ("overrides", "field", "text"),
    [
        ({"overflow_max_tokens": ""}, "overflow_max_tokens", "Set the maximum number of tokens"),
        ({"overflow_max_tokens": "0"}, "overflow_max_tokens", "greater than or equal to 1"),
        ({"overflow_max_tokens": "9000"}, "overflow_max_tokens", "more than gpt-4 can take (8192 tokens)"),
        ({"overflow_max_tokens": "9000", "model": "gpt-4o"}, None, None),
        ({"overflow_reserve_ratio": "0.6"}, "overflow_reserve_ratio", "less than or equal to 0.5"),
        (
            {"overflow_strategy": "summarize", "overflow_summary_threshold": "1"},
            "overflow_summary_threshold",
            "greater than or equal to 2",
        ),
    ],
)
def test_validation_errors_sit_next_to_their_field(login, tenant_admin, tenant, provider, overrides, field, text):
    client = login(tenant_admin, tenant)
    response = client.post(reverse("agents:create"), _form(**overrides), **EN)
    if field is None:
        assert response.status_code == 302  # gpt-4o's window is 128K
        return
    assert response.status_code == 200
    form = response.context["form"]
    assert list(form.errors) == [field]
    assert text in " ".join(form.errors[field])
    body = response.content.decode()
    assert f'id="errors-{field}"' in body  # rendered inside the field's own block
    with tenant_scope(tenant):
        assert not Agent.objects.filter(name="Grid helper").exists()


def test_a_duplicate_name_is_reported_on_the_name(login, tenant_admin, tenant, agents):
    response = login(tenant_admin, tenant).post(reverse("agents:create"), _form(name="Solar advisor"), **EN)
    assert response.status_code == 200
    assert "name" in response.context["form"].errors or response.context["form"].non_field_errors()


def test_edit_changes_the_draft_and_keeps_the_published_version(login, tenant_admin, tenant, agents, provider):
    agent = agents["mine"]
    with tenant_scope(tenant):
        agent_publish(agent=agent, user=tenant_admin)
    client = login(tenant_admin, tenant)
    page = client.get(reverse("agents:edit", args=[agent.pk]), **EN)
    assert page.status_code == 200
    response = client.post(
        reverse("agents:edit", args=[agent.pk]),
        _form(name="Solar advisor", overflow_strategy="summarize", overflow_summary_threshold="30"),
        **EN,
    )
    assert response.status_code == 302
    with tenant_scope(tenant):
        agent.refresh_from_db()
        assert agent.token_overflow_config["strategy"] == "summarize"
        assert agent.token_overflow_config["summary_threshold"] == 30
        assert agent.published_version().token_overflow_config["strategy"] == "none"


def test_publish_makes_version_one_then_two(login, tenant_admin, tenant, agents):
    agent = agents["mine"]
    client = login(tenant_admin, tenant)
    confirm = client.get(reverse("agents:publish", args=[agent.pk]), **EN)
    assert confirm.status_code == 200
    assert "New conversations use it" in confirm.content.decode()
    with tenant_scope(tenant):
        assert not AgentVersion.objects.filter(agent=agent).exists()  # a GET publishes nothing

    response = client.post(reverse("agents:publish", args=[agent.pk]), **EN)
    assert response.status_code == 302
    detail = client.get(response.url, **EN).content.decode()
    assert "Published version 1." in detail
    assert 'data-version="1"' in detail
    client.post(reverse("agents:publish", args=[agent.pk]), **EN)
    with tenant_scope(tenant):
        versions = list(AgentVersion.objects.filter(agent=agent).order_by("number"))
    assert [v.number for v in versions] == [1, 2]
    assert versions[1].published_by == tenant_admin
    detail = client.get(reverse("agents:detail", args=[agent.pk]), **EN).content.decode()
    assert 'data-version="2"' in detail and "tenant-admin" in detail


def test_detail_shows_the_metrics(login, member, tenant, agents):
    agent = agents["mine"]
    with tenant_scope(tenant):
        for day, triggers in ((dt.date(2026, 1, 1), 3), (dt.date(2026, 1, 2), 4)):
            OverflowMetric.objects.create(
                tenant=tenant, agent_id=agent.pk, day=day, triggers=triggers, summaries_made=2, summaries_failed=1,
                tokens_saved=1500,
            )  # fmt: skip
    body = login(member, tenant).get(reverse("agents:detail", args=[agent.pk]), **EN).content.decode()
    assert '<span class="metric-value" data-metric="triggers">7</span>' in body
    assert '<span class="metric-value" data-metric="summaries_made">4</span>' in body
    assert '<span class="metric-value" data-metric="summaries_failed">2</span>' in body
    assert '<span class="metric-value" data-metric="tokens_saved">3000</span>' in body
    assert "Draft only" in body


def test_member_reads_but_may_not_change(login, member, tenant, agents):
    agent = agents["mine"]
    client = login(member, tenant)
    listing = client.get(reverse("agents:list"), **EN).content.decode()
    assert "Solar advisor" in listing and "Noodle chef" not in listing
    assert reverse("agents:create") not in listing
    detail = client.get(reverse("agents:detail", args=[agent.pk]), **EN).content.decode()
    assert reverse("agents:publish", args=[agent.pk]) not in detail
    for response in (
        client.get(reverse("agents:create"), **EN),
        client.post(reverse("agents:create"), _form(), **EN),
        client.get(reverse("agents:edit", args=[agent.pk]), **EN),
        client.post(reverse("agents:edit", args=[agent.pk]), _form(name="Renamed"), **EN),
        client.post(reverse("agents:publish", args=[agent.pk]), **EN),
    ):
        assert response.status_code == 403
        assert "Only owners and admins of" in response.content.decode()
    with tenant_scope(tenant):
        assert not AgentVersion.objects.filter(agent=agent).exists()
        assert Agent.objects.filter(name="Solar advisor").exists()
        assert not Agent.objects.filter(name="Grid helper").exists()


def test_another_tenants_agent_is_not_found(login, tenant_admin, tenant, other_tenant, agents):
    theirs = agents["theirs"]
    client = login(tenant_admin, tenant)
    assert client.get(reverse("agents:detail", args=[theirs.pk])).status_code == 404
    assert client.get(reverse("agents:edit", args=[theirs.pk])).status_code == 404
    assert client.post(reverse("agents:edit", args=[theirs.pk]), _form(name="Taken")).status_code == 404
    assert client.get(reverse("agents:publish", args=[theirs.pk])).status_code == 404
    assert client.post(reverse("agents:publish", args=[theirs.pk])).status_code == 404
    with tenant_scope(other_tenant):
        theirs.refresh_from_db()
        assert theirs.name == "Noodle chef"
        assert not AgentVersion.objects.filter(agent=theirs).exists()


def test_pages_need_a_login(client, agents):
    response = client.get(reverse("agents:list"))
    assert response.status_code == 302 and reverse("login") in response.url


def test_home_card_for_every_member(login, member, tenant):
    body = login(member, tenant).get(reverse("home"), **EN).content.decode()
    assert 'data-card="agents"' in body


def test_list_of_twenty_agents_is_a_fixed_number_of_queries(
    login, tenant_admin, tenant, provider, django_assert_max_num_queries
):
    with tenant_scope(tenant):
        for n in range(20):
            agent = AgentFactory(tenant=tenant, name=f"agent {n:02}", provider=provider)
            agent_publish(agent=agent, user=tenant_admin)
    client = login(tenant_admin, tenant)
    client.get(reverse("agents:list"))  # warm the session and the translation catalogue
    with django_assert_max_num_queries(8):
        body = client.get(reverse("agents:list"), **EN).content.decode()
    assert body.count("<tr data-agent=") == 20
    assert body.count(">v1<") == 20


def _counts() -> dict[str, int]:
    counts = {}
    for tenant in Tenant.objects.all():
        with tenant_scope(tenant):
            counts[tenant.slug] = (Agent.objects.count(), AgentVersion.objects.count())
    return counts


def test_seed_demo_gives_each_tenant_published_agents_and_is_idempotent():
    call_command("seed_demo", password="pw-for-tests-1", stdout=open("/dev/null", "w"))  # noqa: SIM115
    first = _counts()
    # The packs add theirs: the restaurant's waiter and menu advisor, the energy tenant's three PV agents and their
    # planner.
    assert first == {"energy": (7, 7), "restaurant": (5, 5)}
    energy = Tenant.objects.get(slug="energy")
    with tenant_scope(energy):
        strategies = {a.name: a.published_version().token_overflow_config for a in Agent.objects.all()}
    assert strategies["能源顾问 / Energy advisor"]["strategy"] == "sliding_window"
    assert strategies["能源顾问 / Energy advisor"]["max_tokens"] == 8192
    assert strategies["长对话助手 / Long-conversation assistant"]["strategy"] == "summarize"
    assert strategies["长对话助手 / Long-conversation assistant"]["summary_threshold"] == 20
    assert strategies["通用助手 / General assistant"]["strategy"] == "none"

    call_command("seed_demo", password="pw-for-tests-1", stdout=open("/dev/null", "w"))  # noqa: SIM115
    assert _counts() == first


def _chat_stub(request, conversation_id):  # pragma: no cover - only reversed, never requested
    raise AssertionError("not requested")


# A urlconf with a stand-in for the chat page, so the detail page's conversation list can be checked on its own.
urlpatterns = [
    path("chat-stub/", include(([path("<int:conversation_id>/", _chat_stub, name="conversation")], "chat"))),
    path("", include("config.urls")),
]


@pytest.mark.urls("tests.agents.test_views")
def test_detail_lists_only_the_users_own_conversations(login, member, tenant, agents):
    agent = agents["mine"]
    colleague = MembershipFactory(tenant=tenant, role=Role.MEMBER, user=UserFactory(username="colleague")).user
    with tenant_scope(tenant):
        mine = conversation_start(agent=agent, user=member, title="My solar question")
        conversation_start(agent=agent, user=colleague, title="Colleague's private question")
    body = login(member, tenant).get(reverse("agents:detail", args=[agent.pk]), **EN).content.decode()
    assert "My solar question" in body
    assert f'href="/chat-stub/{mine.pk}/"' in body
    assert "Colleague's private question" not in body
    assert "2 conversations in this tenant in all." in body


def test_detail_without_the_chat_page_has_no_conversation_list(login, member, tenant, agents):
    body = login(member, tenant).get(reverse("agents:detail", args=[agents["mine"].pk]), **EN).content.decode()
    try:
        reverse("chat:conversation", args=[1])
    except NoReverseMatch:
        assert "Your conversations with this agent" not in body
    else:
        assert "Your conversations with this agent" in body


def test_pages_render_in_chinese(login, tenant_admin, tenant, agents):
    client = login(tenant_admin, tenant)
    agent = agents["mine"]
    for url in (
        reverse("agents:list"),
        reverse("agents:create"),
        reverse("agents:detail", args=[agent.pk]),
        reverse("agents:edit", args=[agent.pk]),
        reverse("agents:publish", args=[agent.pk]),
    ):
        response = client.get(url, HTTP_ACCEPT_LANGUAGE="zh-hans")
        assert response.status_code == 200, url
        assert '<html lang="zh-hans">' in response.content.decode()


def test_max_tokens_must_hold_the_system_prompt_and_a_short_message(login, tenant_admin, tenant, provider):
    """A newcomer's finding: a sliding window of 10 tokens saved, and the chat then sent 13 without a word."""
    client = login(tenant_admin, tenant)
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"
    response = client.post(reverse("agents:create"), _form(overflow_max_tokens="10"))
    assert response.status_code == 200
    errors = response.context["form"].errors["overflow_max_tokens"]
    assert "enter at least" in errors[0] and "the system prompt alone takes" in errors[0]
    least = int(errors[0].rsplit("enter at least ", 1)[1].rstrip("."))
    assert least > 64
    assert client.post(reverse("agents:create"), _form(overflow_max_tokens=str(least))).status_code == 302


def test_the_tools_are_a_table_of_checkbox_name_and_description(login, tenant_admin, tenant, provider):
    """A newcomer's finding: the Tools section ran on as one paragraph, checkboxes far from their labels."""
    client = login(tenant_admin, tenant)
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"
    page = client.get(reverse("agents:create")).content.decode()
    table = page.split('id="tool-table"', 1)[1].split("</table>", 1)[0]
    row = table.split('data-tool="http_request"', 1)[1].split("</tr>", 1)[0]
    assert 'type="checkbox"' in row and 'value="http_request"' in row
    assert 'HTTP request<br><code class="tool-name">http_request</code>' in row  # the label, then the identifier
    zh = client.get(reverse("agents:create"), HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "知识库检索<br>" in zh and "点餐<br>" not in zh  # labels in the page's language; no pack not enabled
    created = client.post(reverse("agents:create"), _form(tools=["http_request", "deep_think"]))
    assert created.status_code == 302
    with tenant_scope(tenant):
        assert sorted(Agent.objects.get(name="Grid helper").tools) == ["deep_think", "http_request"]
