"""Faults of the model server, on the real chat path (websocket, frame log, database): a storm of 5xx and 429
answers across many conversations at once ends every turn with a clear error after a bounded number of tries, keeps
every user's message, and leaves no conversation stuck: once the model is back, each one answers again."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from agents.services import agent_create, conversation_start
from core.db import database_sync_to_async
from memory.models import Message
from tenants.scope import tenant_scope
from tests.chat.test_consumer import _connect, _frames_until, _send
from tests.factories import MembershipFactory
from tests.llm.factories import ModelProviderFactory
from tests.turns import wait_turns

pytestmark = pytest.mark.django_db(transaction=True)

CHATS = 12


@pytest.fixture(autouse=True)
def _fast_retries(settings):
    settings.LLM_RETRY_BASE_DELAY = 0.01
    settings.LLM_RETRY_MAX_DELAY = 0.02
    settings.CHAT_STREAM_PREFIX = f"test-faults-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def chats(tenant, scripted_llm):
    with tenant_scope(tenant):
        ModelProviderFactory(tenant=tenant, name="scripted", base_url=scripted_llm.base_url, is_default=True,
                             max_retries=2)  # fmt: skip
        agent = agent_create(tenant=tenant, name="Storm", model="gpt-4")
        users = [MembershipFactory(tenant=tenant).user for _ in range(CHATS)]
        return [(user, conversation_start(agent=agent, user=user)) for user in users]


def _stored(tenant, conversation):
    with tenant_scope(tenant):
        return list(Message.objects.filter(conversation=conversation).order_by("id").values_list("role", "status"))


@pytest.mark.parametrize(("error", "code"), [({"status": 503}, "provider_error"),
                                             ({"status": 429, "retry_after": 0.01}, "rate_limited")])  # fmt: skip
async def test_an_error_storm_ends_every_turn_clearly_and_leaves_nothing_stuck(tenant, chats, scripted_llm, error,
                                                                                code):  # fmt: skip
    scripted_llm.set_rules({"when": {}, "reply": {"error": error}})
    sockets = [await _connect(user, tenant, conversation.pk) for user, conversation in chats]
    for number, socket in enumerate(sockets):
        await socket.send_json_to(_send(f"question {number}"))
    results = await asyncio.gather(*(_frames_until(socket, timeout=20) for socket in sockets))
    await wait_turns()
    for frames in results:
        assert frames[-1]["type"] == "error" and frames[-1]["code"] == code and frames[-1]["message"]
    assert len(await asyncio.to_thread(scripted_llm.requests)) == CHATS * 3  # bounded: the try and 2 retries each
    for _user, conversation in chats:
        stored = await database_sync_to_async(_stored)(tenant, conversation)
        assert stored[0] == ("user", "complete")  # the user's message is kept

    scripted_llm.set_rules({"when": {}, "reply": {"text": "back again"}})
    for number, socket in enumerate(sockets):
        await socket.send_json_to(_send(f"again {number}"))
    results = await asyncio.gather(*(_frames_until(socket, timeout=20) for socket in sockets))
    await wait_turns()
    assert all(frames[-1]["type"] == "done" and frames[-1]["status"] == "complete" for frames in results)
    for socket in sockets:
        await socket.disconnect()
