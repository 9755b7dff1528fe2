"""A conversation made for its first message (a stateless /v1 request): admission stores the message in the hop that
made the conversation, and the turn engine neither asks the frame log about earlier turns nor stores it again; a
refusal after that leaves the taking back to admission, which made the conversation (engine.admission._forget)."""

from __future__ import annotations

import pytest

from core.db import database_sync_to_async
from engine import turns
from engine.turns import Outcome, store_new, submit_user_message
from memory.models import Message
from tenants.scope import tenant_scope
from tests.chat.test_consumer import conversation  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db(transaction=True)


async def _stored_with_conversation(tenant, conversation, client_id: str) -> turns.Stored:  # noqa: F811
    """ "Hello" stored as admission stores a new conversation's first message (store_new, in its own hop)."""

    def store() -> turns.Stored:
        with tenant_scope(tenant):
            return store_new(conversation, client_id, "Hello")

    return await database_sync_to_async(store)()


async def test_a_message_stored_with_its_conversation_is_refused_as_overloaded_not_as_its_own_resend(
    tenant,
    conversation,  # noqa: F811
    settings,
):
    settings.CHAT_MAX_TURNS, settings.CHAT_TURN_QUEUE = 1, 0
    gate = turns.turn_gate()
    gate.running += 1  # the process's one place is taken
    try:
        stored = await _stored_with_conversation(tenant, conversation, "first-1")
        with tenant_scope(tenant):
            submission = await submit_user_message(
                conversation=conversation, client_id="first-1", content="Hello", fresh=True, stored=stored
            )
    finally:
        gate.running -= 1
    assert submission.outcome == Outcome.OVERLOADED and submission.task is None


async def test_a_message_stored_with_its_conversation_starts_its_turn_without_a_second_insert(
    tenant,
    conversation,  # noqa: F811
):
    stored = await _stored_with_conversation(tenant, conversation, "first-2")
    with tenant_scope(tenant):
        submission = await submit_user_message(
            conversation=conversation, client_id="first-2", content="Hello", fresh=True, stored=stored
        )
        assert submission.outcome == Outcome.STARTED and submission.message.pk == stored[0].pk
        await submission.task

    def user_messages() -> int:
        with tenant_scope(tenant):
            return Message.objects.filter(conversation=conversation, client_id="first-2").count()

    assert await database_sync_to_async(user_messages)() == 1
