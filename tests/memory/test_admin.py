"""The memory admin: conversations with their messages and context, read-only; tenant admins see only theirs."""

import pytest
from django.urls import reverse

from agents.services import conversation_start
from memory.counters import overflow_metric_add
from memory.services import message_add
from tenants.scope import tenant_scope

pytestmark = pytest.mark.django_db


@pytest.fixture
def conversations(tenant, other_tenant, member, other_tenant_admin, make_agent):
    from agents.services import agent_create

    with tenant_scope(tenant):
        mine = conversation_start(agent=make_agent(), user=member, title="Solar chat")
        message_add(conversation=mine, role="user", content="How many panels fit my roof?")
        overflow_metric_add(tenant_id=tenant.pk, agent_id=mine.agent_id, triggers=3)
    with tenant_scope(other_tenant):
        agent = agent_create(tenant=other_tenant, name="Noodle chef")
        theirs = conversation_start(agent=agent, user=other_tenant_admin, title="Noodle chat")
        message_add(conversation=theirs, role="user", content="Secret noodle recipe")
    return {"mine": mine, "theirs": theirs}


def test_tenant_admin_sees_their_conversation_with_messages_and_context(login, tenant_admin, tenant, conversations):
    client = login(tenant_admin, tenant)
    listing = client.get(reverse("admin:memory_conversation_changelist")).content.decode()
    assert "Solar chat" in listing and "Noodle chat" not in listing
    page = client.get(reverse("admin:memory_conversation_change", args=[conversations["mine"].pk])).content.decode()
    assert "How many panels fit my roof?" in page
    assert conversations["mine"].memory_key in page
    messages = client.get(reverse("admin:memory_message_changelist")).content.decode()
    assert "How many panels" in messages and "Secret noodle" not in messages
    metrics = client.get(reverse("admin:memory_overflowmetric_changelist"))
    assert metrics.status_code == 200
    assert client.get(reverse("admin:memory_message_add")).status_code == 403


def test_tenant_admin_is_refused_another_tenants_conversation(login, tenant_admin, tenant, conversations):
    client = login(tenant_admin, tenant)
    theirs = conversations["theirs"]
    for url in (
        reverse("admin:memory_conversation_change", args=[theirs.pk]),
        reverse("admin:memory_conversation_delete", args=[theirs.pk]),
    ):
        response = client.get(url, follow=True)
        assert response.redirect_chain
        body = response.content.decode()
        assert "Noodle chat" not in body and "Secret noodle" not in body


def test_platform_superuser_opens_every_memory_page(login, superuser, tenant, conversations):
    client = login(superuser, tenant)
    theirs = conversations["theirs"]
    listing = client.get(reverse("admin:memory_conversation_changelist")).content.decode()
    assert "Solar chat" in listing and "Noodle chat" in listing
    page = client.get(reverse("admin:memory_conversation_change", args=[theirs.pk]))
    assert page.status_code == 200 and "Secret noodle recipe" in page.content.decode()
    for name in ("memory_message_changelist", "memory_overflowmetric_changelist", "agents_agent_changelist"):
        assert client.get(reverse(f"admin:{name}")).status_code == 200
    assert client.get(reverse("admin:agents_agent_change", args=[theirs.agent_id])).status_code == 200
