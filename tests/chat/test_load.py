"""The chat surface under load, in one process: the database work per connect and per turn is bounded, a frame lost
on the bus is repaired before the page sees a hole, a full process refuses a message with a retry hint instead of
failing, and waiting turns are served fairly between tenants. (Several processes: tests/chat/test_processes.py.)"""

from __future__ import annotations

import asyncio
import time

import pytest
from django.db import connection

from agents.services import agent_create, agent_publish, conversation_start
from chat.consumers import ConversationSocket
from core.db import database_sync_to_async
from memory.models import Message
from tenants.scope import tenant_scope
from tests.chat.test_consumer import (  # noqa: F401  (fixtures)
    _assert_consecutive,
    _connect,
    _frames_until,
    _isolated_streams,
    _send,
    _socket,
    conversation,
)
from tests.factories import MembershipFactory, UserFactory
from tests.llm.factories import ModelProviderFactory
from tests.queries import count_hops, count_statements
from tests.turns import wait_turns

pytestmark = pytest.mark.django_db(transaction=True)

# Measured: a connect reads the session, the user, the membership and the conversation (4). A chat turn of an agent
# that was never published, with the tenant's monthly tokens read afresh (LLM_QUOTA_CACHE_SECONDS=0, the worst case):
# the engine's admission reads the tenant's monthly tokens (is its budget spent); the message stored (on PostgreSQL
# one statement with its context append, the conversation's time and the read of the message before it: does the
# conversation wait for an API client's tool results; elsewhere four); the draft's knowledge bases (its
# configuration, twice); the context row; the active messages; the quota again (the model call's check); the usage
# record; the reply, stored as the message was. A published agent's conversation with the quota read kept (the
# default) reads neither the draft nor the quota: PUBLISHED_TURN_STATEMENTS.
CONNECT_STATEMENTS = 4
TURN_STATEMENTS = {"postgresql": 9, "sqlite": 14}
PUBLISHED_TURN_STATEMENTS = {"postgresql": 5, "sqlite": 10}
# Database hops of such a turn: admission (its checks and the message stored), the turn's setup, the usage
# record, the reply.
TURN_HOPS = 4


async def test_a_connect_runs_a_bounded_number_of_statements(member, tenant, conversation):  # noqa: F811
    socket = await _socket(member, tenant, conversation.pk)  # logs in (not part of the connect)
    with count_statements() as statements:
        connected, _code = await socket.connect()
        assert connected and (await socket.receive_json_from(timeout=5))["type"] == "hello"
    await socket.disconnect()
    assert 0 < len(statements) <= CONNECT_STATEMENTS, statements.sql


async def test_a_turn_runs_a_bounded_number_of_statements_and_none_per_token(
    member,
    tenant,
    conversation,  # noqa: F811
    scripted_llm,
    settings,
):
    settings.LLM_QUOTA_CACHE_SECONDS = 0  # every turn reads the tenant's monthly tokens (the worst case)

    statements_of: list[list[str]] = []

    async def turn_statements(tokens: int) -> int:
        scripted_llm.set_rules({"when": {}, "reply": {"text_tokens": tokens, "delay": 0.001}})
        socket = await _connect(member, tenant, conversation.pk)
        with count_statements() as statements:
            await socket.send_json_to(_send("hello"))
            frames = await _frames_until(socket)
            await wait_turns()
        await socket.disconnect()
        assert frames[-1]["type"] == "done" and frames[-1]["status"] == "complete"
        statements_of.append(statements.sql)
        return len(statements)

    short, long = await turn_statements(5), await turn_statements(300)
    assert 0 < short <= TURN_STATEMENTS[connection.vendor], statements_of
    assert long == short  # nothing per token


async def test_a_published_agents_turn_runs_fewer_statements(member, tenant, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text_tokens": 5, "delay": 0.001}})
    published = await database_sync_to_async(_published_conversation)(tenant, member, scripted_llm.base_url)
    counts = []
    for number in range(2):  # the first turn reads the tenant's monthly tokens, the second the kept figure
        socket = await _connect(member, tenant, published.pk)
        with count_statements() as statements:
            await socket.send_json_to(_send(f"hello {number}", f"c-{number}"))
            frames = await _frames_until(socket)
            await wait_turns()
        await socket.disconnect()
        assert frames[-1]["type"] == "done" and frames[-1]["status"] == "complete"
        counts.append(statements.sql)
    assert 0 < len(counts[1]) <= PUBLISHED_TURN_STATEMENTS[connection.vendor], counts[1]


async def test_a_published_agents_turn_takes_a_bounded_number_of_database_hops(member, tenant, scripted_llm):
    """Each hop waits for a database thread and for the event loop again, the longer the busier the process:
    admission's checks, the message stored, the turn's setup (the agent, the context, the history), the usage
    record, the reply."""
    scripted_llm.set_rules({"when": {}, "reply": {"text_tokens": 5, "delay": 0.001}})
    published = await database_sync_to_async(_published_conversation)(tenant, member, scripted_llm.base_url)
    socket = await _connect(member, tenant, published.pk)
    for number in range(2):  # the second turn: the tenant's monthly tokens kept
        with count_hops() as hops:
            await socket.send_json_to(_send(f"hello {number}", f"c-{number}"))
            frames = await _frames_until(socket)
            await wait_turns()
        assert frames[-1]["type"] == "done" and frames[-1]["status"] == "complete"
    await socket.disconnect()
    assert len(hops) <= TURN_HOPS, hops


def _published_conversation(tenant, user, base_url):
    with tenant_scope(tenant):
        ModelProviderFactory(tenant=tenant, name="scripted", base_url=base_url, is_default=True)
        agent = agent_create(tenant=tenant, name="Advisor", system_prompt="You advise.", model="gpt-4")
        agent_publish(agent=agent, user=None)
        return conversation_start(agent=agent, user=user)


async def test_a_frame_lost_on_the_bus_is_read_from_the_log_before_the_next_one(
    member,
    tenant,
    conversation,  # noqa: F811
    scripted_llm,
    monkeypatch,
):
    scripted_llm.set_rules({"when": {}, "reply": {"text_tokens": 80, "delay": 0.005}})
    deliver, lost = ConversationSocket.deliver, []

    def lossy(self, seq, body):
        if '"type":"delta"' in body and not lost and seq > 3:
            lost.append(seq)  # dropped on the way, as a full buffer or a reconnecting bus would
            return
        deliver(self, seq, body)

    monkeypatch.setattr(ConversationSocket, "deliver", lossy)
    socket = await _connect(member, tenant, conversation.pk)
    await socket.send_json_to({"type": "catch_up", "after_seq": 0})
    await socket.send_json_to(_send("tell me"))
    frames = await _frames_until(socket)
    await wait_turns()
    await socket.disconnect()

    assert lost, "no frame was dropped: the test did not inject its fault"
    _assert_consecutive(frames)
    assert lost[0] in [frame["seq"] for frame in frames]
    (_user, reply) = await database_sync_to_async(_messages)(tenant, conversation)
    assert reply.content == "".join(frame["content"] for frame in frames if frame["type"] == "delta")


def _messages(tenant, conversation):  # noqa: F811
    with tenant_scope(tenant):
        return list(Message.objects.filter(conversation=conversation).order_by("id"))


def _conversations(tenant, user, base_url, count):
    with tenant_scope(tenant):
        ModelProviderFactory(tenant=tenant, name="scripted", base_url=base_url, is_default=True)
        agent = agent_create(tenant=tenant, name="Advisor", system_prompt="You advise.", model="gpt-4")
        return [conversation_start(agent=agent, user=user) for _ in range(count)]


async def test_a_full_process_refuses_a_message_with_a_retry_hint_and_stores_nothing(
    member, tenant, scripted_llm, settings
):
    settings.CHAT_MAX_TURNS, settings.CHAT_TURN_QUEUE, settings.CHAT_BUSY_RETRY_SECONDS = 2, 0, 7
    scripted_llm.set_rules({"when": {}, "reply": {"text_tokens": 40, "delay": 0.02}})
    first, second, third = await database_sync_to_async(_conversations)(tenant, member, scripted_llm.base_url, 3)
    sockets = [await _connect(member, tenant, c.pk, language="zh-CN") for c in (first, second, third)]
    await sockets[0].send_json_to(_send("one"))
    await sockets[1].send_json_to(_send("two"))
    for socket in sockets[:2]:
        assert (await socket.receive_json_from(timeout=5))["type"] == "user_message"
    await sockets[2].send_json_to(_send("three", "c-three"))
    refused = await sockets[2].receive_json_from(timeout=5)

    assert (refused["type"], refused["code"], refused["seq"]) == ("error", "overloaded", None)
    assert refused["client_id"] == "c-three" and refused["retry_after"] == 7
    assert refused["message"] == "平台繁忙，未能接收这条消息。请在 7 秒后重试。"
    assert await database_sync_to_async(_messages)(tenant, third) == []
    for socket in sockets[:2]:
        assert (await _frames_until(socket))[-1]["status"] == "complete"
    await wait_turns()

    await sockets[2].send_json_to(_send("three", "c-three"))  # the page's resend, once there is room
    frames = await _frames_until(sockets[2])
    await wait_turns()
    assert frames[-1]["status"] == "complete"
    stored = await database_sync_to_async(_messages)(tenant, third)
    assert (stored[0].role, stored[0].content) == ("user", "three")
    for socket in sockets:
        await socket.disconnect()


async def test_waiting_turns_are_served_in_turn_by_tenant(tenant, other_tenant, scripted_llm, settings):
    """One tenant's many waiting chats do not starve another tenant's one: with one place, tenant B's turn, queued
    after six of tenant A's, starts after at most one of them."""
    settings.CHAT_MAX_TURNS, settings.CHAT_TURN_QUEUE = 1, 20
    scripted_llm.set_rules({"when": {}, "reply": {"text_tokens": 30, "delay": 0.02}})

    def users():
        a, b = UserFactory(), UserFactory()
        MembershipFactory(user=a, tenant=tenant)
        MembershipFactory(user=b, tenant=other_tenant)
        return a, b

    user_a, user_b = await database_sync_to_async(users)()
    chats_a = await database_sync_to_async(_conversations)(tenant, user_a, scripted_llm.base_url, 7)
    (chat_b,) = await database_sync_to_async(_conversations)(other_tenant, user_b, scripted_llm.base_url, 1)
    sockets_a = [await _connect(user_a, tenant, c.pk) for c in chats_a]
    socket_b = await _connect(user_b, other_tenant, chat_b.pk)

    finished: list[str] = []

    async def chat(name, socket, delay):
        await asyncio.sleep(delay)
        await socket.send_json_to(_send(name))
        frames = await _frames_until(socket, timeout=30)
        assert frames[-1]["status"] == "complete"
        finished.append(name)

    started = time.monotonic()
    await asyncio.gather(
        *(chat(f"a{n}", socket, 0.01 * n) for n, socket in enumerate(sockets_a)),
        chat("b", socket_b, 0.2),  # after all of A's are in: one running, six waiting
    )
    await wait_turns()
    for socket in [*sockets_a, socket_b]:
        await socket.disconnect()

    assert finished.index("b") <= 2, (finished, time.monotonic() - started)
    assert sorted(finished) == sorted([f"a{n}" for n in range(7)] + ["b"])
