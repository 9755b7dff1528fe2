"""Trying a draft (issue 18, item 2): an administrator starts a test conversation from the agent's page; it runs the
draft as it is now, is marked as a test in the chat, and is not for members (nor another tenant). Conversations
started in the chat keep running the published version."""

import pytest
from django.urls import reverse

from agents.models import Agent
from agents.services import agent_create, agent_publish, agent_update, conversation_start
from core.db import database_sync_to_async
from memory.models import Conversation
from tenants.models import Membership, Role
from tenants.scope import tenant_scope
from tests.chat.test_consumer import _isolated_streams, _socket  # noqa: F401  (the fixture)
from tests.llm.factories import ModelProviderFactory
from tests.turns import user_turn

BANNER = "Test conversation - draft, not published."


def _published_agent(tenant, base_url="http://127.0.0.1:9/v1"):
    """An agent published with the prompt PUBLISHED, whose draft then says DRAFT."""
    with tenant_scope(tenant):
        ModelProviderFactory(tenant=tenant, name="scripted", base_url=base_url, is_default=True, max_retries=0)
        agent = agent_create(tenant=tenant, name="Panel advisor", system_prompt="PUBLISHED prompt", model="gpt-4",
                             token_overflow_config={"strategy": "none"})  # fmt: skip
        agent_publish(agent=agent, user=None)
        return agent_update(agent=agent, system_prompt="DRAFT prompt")


def _test_conversations(tenant):
    with tenant_scope(tenant):
        return list(Conversation.objects.filter(is_test=True))


@pytest.mark.django_db
def test_an_admin_tries_the_draft_in_a_marked_test_conversation(login, tenant, tenant_admin):
    agent = _published_agent(tenant)
    client = login(tenant_admin, tenant)
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"
    page = client.get(reverse("agents:detail", args=[agent.pk])).content.decode()
    assert 'id="try-draft"' in page and reverse("agents:try_draft", args=[agent.pk]) in page
    assert client.get(reverse("agents:try_draft", args=[agent.pk])).status_code == 405  # a POST starts one

    response = client.post(reverse("agents:try_draft", args=[agent.pk]))
    (trial,) = _test_conversations(tenant)
    assert response.status_code == 302 and response["Location"] == reverse("chat:conversation", args=[trial.pk])
    assert trial.version is None and trial.user == tenant_admin
    chat = client.get(response["Location"]).content.decode()
    assert 'id="test-banner"' in chat and BANNER in chat and 'id="chat-form"' in chat
    listing = client.get(reverse("chat:list")).content.decode()
    assert f'data-conversation="{trial.pk}"' in listing and "Test (draft)" in listing
    # A conversation started in the chat is not a test, and its page has no banner.
    with tenant_scope(tenant):
        normal = conversation_start(agent=agent, user=tenant_admin)
    assert not normal.is_test and normal.version is not None
    assert 'id="test-banner"' not in client.get(reverse("chat:conversation", args=[normal.pk])).content.decode()


@pytest.mark.django_db
def test_a_never_published_agent_can_be_tried_but_a_goal_agent_cannot(login, tenant, tenant_admin):
    with tenant_scope(tenant):
        draft = agent_create(tenant=tenant, name="Only a draft", system_prompt="x")
        goal = agent_create(tenant=tenant, name="Goal", kind="goal", token_overflow_config={"strategy": "none"})
    client = login(tenant_admin, tenant)
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"
    page = client.get(reverse("agents:detail", args=[draft.pk])).content.decode()
    assert "Try the draft in a test conversation" in page and 'id="try-draft"' in page
    assert client.post(reverse("agents:try_draft", args=[draft.pk])).status_code == 302
    assert 'id="try-draft"' not in client.get(reverse("agents:detail", args=[goal.pk])).content.decode()
    assert client.post(reverse("agents:try_draft", args=[goal.pk])).status_code == 404
    assert [c.agent_id for c in _test_conversations(tenant)] == [draft.pk]


@pytest.mark.django_db
def test_members_and_another_tenant_are_refused(login, tenant, tenant_admin, member, other_tenant, other_tenant_admin):
    agent = _published_agent(tenant)
    client = login(member, tenant)
    assert 'id="try-draft"' not in client.get(reverse("agents:detail", args=[agent.pk])).content.decode()
    assert client.post(reverse("agents:try_draft", args=[agent.pk])).status_code == 403
    assert login(other_tenant_admin, other_tenant).post(reverse("agents:try_draft", args=[agent.pk])).status_code == 404
    assert _test_conversations(tenant) == []

    # The admin's test conversation is not the member's to open, nor one of their own once they are a member again.
    with tenant_scope(tenant):
        admins = conversation_start(agent=agent, user=tenant_admin, draft=True)
        own = conversation_start(agent=agent, user=member, draft=True)  # e.g. started while they were an admin
    client = login(member, tenant)
    for trial in (admins, own):
        assert client.get(reverse("chat:conversation", args=[trial.pk])).status_code == 404
    assert f'data-conversation="{own.pk}"' not in client.get(reverse("chat:list")).content.decode()
    assert (
        reverse("chat:conversation", args=[own.pk])
        not in client.get(reverse("agents:detail", args=[agent.pk])).content.decode()
    )


def _demote(tenant, user):
    Membership.objects.filter(tenant=tenant, user=user).update(role=Role.MEMBER)


@pytest.mark.django_db(transaction=True)
async def test_the_socket_refuses_a_test_conversation_to_a_member(tenant, tenant_admin):
    agent = await database_sync_to_async(_published_agent)(tenant)

    def start():
        with tenant_scope(tenant):
            return conversation_start(agent=agent, user=tenant_admin, draft=True)

    trial = await database_sync_to_async(start)()
    socket = await _socket(tenant_admin, tenant, trial.pk)
    connected, _code = await socket.connect()
    assert connected
    await socket.disconnect()
    await database_sync_to_async(_demote)(tenant, tenant_admin)
    socket = await _socket(tenant_admin, tenant, trial.pk)
    connected, code = await socket.connect()
    assert not connected and code == 4403
    await socket.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_the_test_conversation_runs_the_draft_as_it_is_now_and_the_chat_the_published_version(
    tenant, tenant_admin, scripted_llm
):
    scripted_llm.set_rules(
        {"when": {"system_prompt": "DRAFT again"}, "reply": {"text": "from the edited draft"}},
        {"when": {"system_prompt": "DRAFT"}, "reply": {"text": "from the draft"}},
        {"when": {"system_prompt": "PUBLISHED"}, "reply": {"text": "from the published version"}},
    )
    agent = await database_sync_to_async(_published_agent)(tenant, scripted_llm.base_url)

    def start(draft):
        with tenant_scope(tenant):
            return conversation_start(agent=Agent.objects.get(pk=agent.pk), user=tenant_admin, draft=draft)

    trial, normal = await database_sync_to_async(start)(True), await database_sync_to_async(start)(False)
    assert (await user_turn(tenant, trial, "Hello"))[1].content == "from the draft"
    assert (await user_turn(tenant, normal, "Hello"))[1].content == "from the published version"

    def edit():
        with tenant_scope(tenant):
            agent_update(agent=Agent.objects.get(pk=agent.pk), system_prompt="DRAFT again")

    await database_sync_to_async(edit)()  # while the test conversation is open (its agent read before the edit)
    assert (await user_turn(tenant, trial, "Hello again"))[1].content == "from the edited draft"
    assert (await user_turn(tenant, normal, "Hello again"))[1].content == "from the published version"
