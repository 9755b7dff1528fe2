"""Long-term memory through the turn contract: recalled before a turn into the one system message, extracted after
it without delaying the reply, never across users or tenants."""

import asyncio
import json
import time

import pytest

from agents.services import agent_create, conversation_start
from agents.tools import get_tool
from agents.tools.base import ToolCallContext
from core.db import database_sync_to_async
from memory.models import Event, MemoryItem
from memory.overflow import RECALLED_HEADING
from memory.services import extract_line
from tenants.scope import tenant_scope
from tests.factories import MembershipFactory, UserFactory
from tests.llm.factories import ModelProviderFactory
from tests.turns import user_turn

pytestmark = pytest.mark.django_db(transaction=True)

EXTRACT = {"system_prompt": {"contains": "event graph"}}


@pytest.fixture
def memory_agent(tenant, scripted_llm, settings):
    settings.MEMORY_EXTRACT_IN_THREAD = False  # extraction runs right after the turn, so the test can look

    def _make(extraction="rules", overflow=None):
        with tenant_scope(tenant):
            ModelProviderFactory(tenant=tenant, name="scripted", base_url=scripted_llm.base_url, is_default=True,
                                 max_retries=0)  # fmt: skip
            return agent_create(
                tenant=tenant, name="Supply chain", system_prompt="You track supply chain risks.", model="gpt-4",
                token_overflow_config=overflow or {"strategy": "none"}, long_term_memory=True,
                memory_extraction=extraction,
            )  # fmt: skip

    return database_sync_to_async(_make)


def _start(tenant, agent, user):
    @database_sync_to_async
    def start():
        with tenant_scope(tenant):
            return conversation_start(agent=agent, user=user)

    return start()


def _system_prompts(scripted_llm):
    return [
        request["body"]["messages"][0]["content"]
        for request in scripted_llm.requests()
        if "event graph" not in request["body"]["messages"][0]["content"]
    ]


async def test_a_new_conversation_recalls_what_the_user_said_in_an_earlier_one(
    tenant, member, memory_agent, scripted_llm
):
    agent = await memory_agent()
    first = await _start(tenant, agent, member)
    await user_turn(tenant, first, "报告：越南A港口因台风临时关闭。")

    second = await _start(tenant, agent, member)
    _user, reply, sink = await user_turn(tenant, second, "A港口现在情况如何？")

    system = (await asyncio.to_thread(_system_prompts, scripted_llm))[-1]
    assert system.startswith("You track supply chain risks.")
    assert RECALLED_HEADING in system and "越南A港口因台风临时关闭" in system
    (step,) = sink.of("step")
    memories = step["agentChatResponse"]["data"]["memories"]
    assert any(item["kind"] == "event" and "A港口" in item["text"] for item in memories)
    # Kept with the reply, so the chat page shows what fed it after a reload too.
    assert {"kind": "event", "text": "报告：越南A港口因台风临时关闭。"} in reply.usage["memories"]

    @database_sync_to_async
    def page():
        from django.test import Client
        from django.urls import reverse

        client = Client()
        client.force_login(member)
        session = client.session
        session["active_tenant_id"] = tenant.pk
        session.save()
        return client.get(reverse("chat:conversation", args=[second.pk]), HTTP_ACCEPT_LANGUAGE="en").content.decode()

    html = await page()
    assert 'class="chat-memories"' in html and "Memories used (" in html and "越南A港口因台风临时关闭" in html


async def test_another_user_of_the_tenant_recalls_nothing_of_it(tenant, member, memory_agent, scripted_llm):
    agent = await memory_agent()
    await user_turn(tenant, await _start(tenant, agent, member), "My locker code is 4711.")

    @database_sync_to_async
    def colleague():
        user = UserFactory()
        MembershipFactory(user=user, tenant=tenant)
        return user

    other = await colleague()
    await user_turn(tenant, await _start(tenant, agent, other), "What is my locker code?")
    system = (await asyncio.to_thread(_system_prompts, scripted_llm))[-1]
    assert "4711" not in system and RECALLED_HEADING not in system


async def test_old_turns_the_window_dropped_are_recalled(tenant, member, memory_agent, scripted_llm):
    agent = await memory_agent(overflow={"strategy": "sliding_window", "max_tokens": 400})
    conversation = await _start(tenant, agent, member)
    await user_turn(tenant, conversation, "My locker code is 4711 and my bike is the red Gazelle.")
    for number in range(6):
        await user_turn(tenant, conversation, f"Filler message {number}: " + "tell me about logistics " * 12)

    await user_turn(tenant, conversation, "Which locker code did I give you?")

    request = (await asyncio.to_thread(scripted_llm.requests))[-1]["body"]["messages"]
    assert not any("4711" in (m.get("content") or "") for m in request[1:])  # the window dropped it...
    assert "(earlier in this conversation) User: My locker code is 4711" in request[0]["content"]  # ...recalled


async def test_a_reply_streams_in_full_while_a_slow_extraction_runs(
    tenant, member, memory_agent, scripted_llm, settings
):
    event = {"event_id": "n1", "actor": "user", "action_type": "report", "content_summary": "Port A is closed"}
    scripted_llm.set_rules(
        {"when": EXTRACT, "reply": {"text": json.dumps({"new_events": [event]}), "stall": 2}},
        {"when": {}, "reply": {"text": "Noted, I will watch port A."}},
    )
    agent = await memory_agent(extraction="model")
    settings.MEMORY_EXTRACT_IN_THREAD = True
    conversation = await _start(tenant, agent, member)

    started = time.perf_counter()
    _user, reply, sink = await user_turn(tenant, conversation, "Port A is closed by a typhoon.")
    elapsed = time.perf_counter() - started

    assert reply.content == "Noted, I will watch port A." and sink.types()[-1] == "done"
    assert elapsed < 1.5  # the 2 s extraction did not hold the turn

    @database_sync_to_async
    def events():
        with tenant_scope(tenant):
            return list(Event.objects.values_list("content_summary", flat=True))

    assert await events() == []  # still running
    await asyncio.to_thread(extract_line.wait, 10)
    assert await events() == ["Port A is closed"]


async def test_the_memory_tools_keep_each_users_memories_apart(tenant, other_tenant, member, memory_agent):
    agent = await memory_agent()
    remember, recall = get_tool("memory_remember"), get_tool("memory_recall")

    @database_sync_to_async
    def people():
        colleague = UserFactory()
        MembershipFactory(user=colleague, tenant=tenant)
        return colleague

    colleague = await people()

    def call(user, on_tenant=tenant, agent_id=agent.pk):
        return ToolCallContext(tenant=on_tenant, user_id=user.pk, agent_id=agent_id)

    assert (await remember.run({"memory": "Allergic to peanuts"}, call(member))).content == "ok"
    assert (await recall.run({"query": "peanuts allergy"}, call(member))).content == ["Allergic to peanuts"]
    assert (await recall.run({"query": "peanuts allergy"}, call(colleague))).content == []
    assert (await recall.run({"query": "peanuts allergy"}, call(member, agent_id=agent.pk + 1))).content == []
    assert (await recall.run({"query": "peanuts allergy"}, call(member, on_tenant=other_tenant))).content == []

    @database_sync_to_async
    def stored():
        with tenant_scope(tenant):
            return list(MemoryItem.objects.values_list("user_id", "key"))

    assert await stored() == [(member.pk, f"{agent.pk}_{member.pk}")]
