"""A conversation whose last reply handed an API client its tool calls goes on only with their results. The message's
own insert reads that (no statement of its own per turn): a new message is refused with nothing stored, a resend of
a stored one is still answered as its duplicate, and the refusal is the admission's, on every database."""

from __future__ import annotations

import pytest

from agents.services import agent_create, agent_publish, conversation_start
from core.db import database_sync_to_async
from engine.admission import Admitted, Caller, CallerKind, Refusal, RefusalCode, Target, admit
from engine.turns import Outcome
from memory.models import ConversationSource, Message, Role
from memory.services import message_add
from tenants.models import Membership
from tenants.scope import tenant_scope
from tests.llm.factories import ModelProviderFactory
from tests.turns import wait_turns

pytestmark = pytest.mark.django_db(transaction=True)

CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


def _waiting(tenant, member, base_url, *, calls: list | None):
    """A conversation whose newest message is an assistant reply with `calls` (its user message sent as "first")."""
    with tenant_scope(tenant):
        ModelProviderFactory(tenant=tenant, name="scripted", base_url=base_url, is_default=True)
        agent = agent_create(tenant=tenant, name="Helper", system_prompt="You help.", model="gpt-4")
        agent_publish(agent=agent, user=None)
        conversation = conversation_start(agent=agent, user=member, source=ConversationSource.API)
        message_add(conversation=conversation, role=Role.USER, content="Weather in Paris?", client_id="first")
        message_add(conversation=conversation, role=Role.ASSISTANT, content="", tool_calls=calls)
        caller = Caller(
            tenant=tenant, source=ConversationSource.API, kind=CallerKind.KEY, user=member,
            membership=Membership.objects.get(tenant=tenant, user=member),
        )  # fmt: skip
        return conversation, caller


def _roles(tenant, conversation) -> list[str]:
    with tenant_scope(tenant):
        return list(Message.objects.filter(conversation=conversation).order_by("id").values_list("role", flat=True))


async def test_a_new_message_is_refused_and_nothing_is_stored(tenant, member, scripted_llm):
    conversation, caller = await database_sync_to_async(_waiting)(tenant, member, scripted_llm.base_url, calls=[CALL])
    answer = await admit(caller=caller, target=Target(conversation_id=conversation.pk), content="and?", client_id="c2")
    assert isinstance(answer, Refusal) and answer.code == RefusalCode.TOOL_RESULTS_PENDING and answer.status == 409
    assert await database_sync_to_async(_roles)(tenant, conversation) == ["user", "assistant"]
    assert scripted_llm.requests() == []  # no turn ran


async def test_a_resend_of_a_stored_message_is_still_its_duplicate(tenant, member, scripted_llm):
    conversation, caller = await database_sync_to_async(_waiting)(tenant, member, scripted_llm.base_url, calls=[CALL])
    answer = await admit(
        caller=caller, target=Target(conversation_id=conversation.pk), content="Weather in Paris?", client_id="first"
    )
    assert isinstance(answer, Admitted) and answer.outcome == Outcome.DUPLICATE
    assert await database_sync_to_async(_roles)(tenant, conversation) == ["user", "assistant"]


@pytest.mark.parametrize("calls", [None, []], ids=["no tool calls", "an empty list"])
async def test_a_reply_without_tool_calls_lets_the_conversation_go_on(calls, tenant, member, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "ok"}})
    conversation, caller = await database_sync_to_async(_waiting)(tenant, member, scripted_llm.base_url, calls=calls)
    answer = await admit(caller=caller, target=Target(conversation_id=conversation.pk), content="and?", client_id="c2")
    assert isinstance(answer, Admitted) and answer.outcome == Outcome.STARTED
    await answer.submission.task
    await wait_turns()
    assert await database_sync_to_async(_roles)(tenant, conversation) == ["user", "assistant", "user", "assistant"]
