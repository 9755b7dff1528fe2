"""A conversation reads as its first words, and before its first message as "new" with its time, never by the global
id (which counts every tenant's conversations)."""

import pytest
from django.utils import timezone, translation

from agents.services import agent_create, conversation_start
from memory.services import message_add
from tenants.scope import tenant_scope

pytestmark = pytest.mark.django_db


def test_an_untitled_conversation_shows_its_time_not_its_global_id(tenant, member):
    with tenant_scope(tenant):
        agent = agent_create(tenant=tenant, name="Helper", system_prompt="Help.", model="gpt-4")
        for _ in range(12):  # ids beyond one digit, so an id in the name would show
            conversation = conversation_start(agent=agent, user=member)
        with translation.override("en"):
            name = str(conversation)
        # Exactly the time (an id check by substring failed whenever the id's digits were in the clock's).
        when = timezone.localtime(conversation.created_at).strftime("%m-%d %H:%M")
        assert name == f"New conversation {when}" and conversation.pk > 9
        with translation.override("zh-hans"):
            assert str(conversation).startswith("新会话")

        message_add(conversation=conversation, role="user", content="How much does a 5 kW roof system cost?")
        conversation.refresh_from_db()
        assert str(conversation).startswith("How much does a 5 kW")
