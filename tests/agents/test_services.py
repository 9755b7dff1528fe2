"""Agents and versions (A1, A2): publishing snapshots the configuration; conversations keep their version."""

import pytest
from django.core.exceptions import ValidationError

from agents.models import AgentVersion
from agents.selectors import agent_list_for_planner
from agents.services import agent_create, agent_publish, agent_update, conversation_start
from memory.models import ConversationContext
from tenants.scope import tenant_scope
from tests.agents.factories import AgentFactory

pytestmark = pytest.mark.django_db

WINDOW = {"strategy": "sliding_window", "max_tokens": 8000}


def test_create_validates_and_normalises_the_overflow_config(in_tenant):
    agent = agent_create(tenant=in_tenant, name="Solar", token_overflow_config=WINDOW)
    assert agent.token_overflow_config == {
        "strategy": "sliding_window", "max_tokens": 8000, "reserve_ratio": 0.1, "summary_threshold": 20,
    }  # fmt: skip
    assert agent_create(tenant=in_tenant, name="Plain").token_overflow_config["strategy"] == "none"

    with pytest.raises(ValidationError) as caught:
        agent_create(tenant=in_tenant, name="Bad", token_overflow_config={"strategy": "summarize"})
    assert "token_overflow_config" in caught.value.message_dict
    with pytest.raises(ValidationError) as caught:
        agent_create(tenant=in_tenant, name="Solar")
    assert "__all__" in caught.value.message_dict or "name" in caught.value.message_dict


def test_publish_snapshots_the_whole_configuration_and_numbers_versions(in_tenant, member):
    agent = agent_create(tenant=in_tenant, name="Solar", system_prompt="v1 prompt", token_overflow_config=WINDOW)
    assert agent.published_version() is None

    first = agent_publish(agent=agent, user=member)
    agent_update(agent=agent, system_prompt="v2 prompt", token_overflow_config={"strategy": "none"})
    assert agent.published_version() == first
    assert first.snapshot["system_prompt"] == "v1 prompt"  # editing the draft leaves the version alone

    second = agent_publish(agent=agent, user=member)
    assert [first.number, second.number] == [1, 2]
    assert agent.published_version() == second
    assert second.published_by == member
    assert second.snapshot["token_overflow_config"]["strategy"] == "none"
    first.refresh_from_db()
    assert first.snapshot["token_overflow_config"]["max_tokens"] == 8000
    assert set(first.snapshot) >= {
        "name",
        "description",
        "system_prompt",
        "provider_id",
        "model",
        "temperature",
        "kind",
    }


def test_a_conversation_keeps_its_version_and_strategy_after_the_agent_changes(in_tenant, member):
    agent = agent_create(tenant=in_tenant, name="Solar", token_overflow_config=WINDOW)
    version = agent_publish(agent=agent, user=member)
    old = conversation_start(agent=agent, user=member)

    agent_update(agent=agent, token_overflow_config={"strategy": "summarize", "max_tokens": 4000})
    agent_publish(agent=agent, user=member)
    new = conversation_start(agent=agent, user=member)

    old.refresh_from_db()
    assert old.version == version
    old_context = ConversationContext.objects.get(conversation=old)
    assert (old_context.strategy, old_context.strategy_config["max_tokens"]) == ("sliding_window", 8000)
    new_context = ConversationContext.objects.get(conversation=new)
    assert (new_context.strategy, new_context.strategy_config["max_tokens"]) == ("summarize", 4000)
    assert new.version.number == 2


def test_an_unpublished_agent_starts_conversations_from_its_draft(in_tenant, member):
    agent = agent_create(tenant=in_tenant, name="Draft", token_overflow_config=WINDOW)
    conversation = conversation_start(agent=agent, user=member)
    assert conversation.version is None
    assert conversation.context.strategy == "sliding_window"
    assert conversation.memory_key == f"{agent.pk}_{member.pk}_{conversation.pk}"


def test_another_tenants_agents_are_not_visible(tenant, other_tenant, member):
    with tenant_scope(other_tenant):
        theirs = AgentFactory(tenant=other_tenant, name="Noodles")
        agent_publish(agent=theirs, user=None)
    with tenant_scope(tenant):
        mine = AgentFactory(tenant=tenant, name="Solar")
        agent_publish(agent=mine, user=None)
        assert [agent.name for agent in agent_list_for_planner(tenant=tenant)] == ["Solar"]
        assert agent_list_for_planner(tenant=other_tenant) == []  # the scope is this tenant's
        assert not AgentVersion.objects.filter(agent_id=theirs.pk).exists()
        # A row of this tenant may not point at the other tenant's agent.
        conversation = conversation_start(agent=mine, user=member)
        conversation.agent_id = theirs.pk
        with pytest.raises(ValidationError) as caught:
            conversation.full_clean()
        assert "agent" in caught.value.message_dict
