"""The memory tasks run in their tenant's scope: a task whose tenant was deleted, or whose conversation is gone or
another tenant's, does nothing and says "gone"."""

import pytest

from agents.services import conversation_start
from memory.services import message_add
from memory.tasks import extract_turn_memory, summarize_conversation
from tenants.models import Tenant
from tenants.scope import no_scope, tenant_scope

pytestmark = pytest.mark.django_db


@pytest.fixture
def conversation(make_agent, member, tenant):
    with tenant_scope(tenant):
        conversation = conversation_start(agent=make_agent(), user=member)
        conversation.question = message_add(conversation=conversation, role="user", content="How big a panel?").pk
    return conversation


def test_each_task_runs_in_its_tenants_scope(conversation):
    with no_scope():
        assert summarize_conversation.delay(conversation.tenant_id, conversation.pk, []).get() == "nothing to do"
        question = conversation.question
        assert extract_turn_memory.delay(conversation.tenant_id, conversation.pk, question, None, "rules").get() == (
            "stored"
        )


def test_a_deleted_tenant_or_another_tenants_conversation_is_gone(conversation, other_tenant):
    missing = Tenant.objects.order_by("-pk").first().pk + 1
    question = conversation.question
    for tenant_id in (missing, other_tenant.pk):  # the other tenant's scope does not see the conversation
        assert summarize_conversation.delay(tenant_id, conversation.pk, [question]).get() == "gone"
        assert extract_turn_memory.delay(tenant_id, conversation.pk, question, None, "rules").get() == "gone"
