"""Seed 2's combined answer: one model call answers the reply and the exchange's events as JSON; the person sees
only the reply, streamed; the events are validated after the turn (one repair, else skipped and counted)."""

import asyncio
import json

import pytest

from agents.runtime import TurnStatus
from core.db import database_sync_to_async
from memory.models import Event, EventRelation, MemoryMetric
from tenants.scope import tenant_scope
from tests.memory.test_recall_turns import _start
from tests.memory.test_recall_turns import memory_agent as memory_agent  # the fixture
from tests.turns import user_turn

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = {"system_prompt": {"contains": "user_reply"}}
EXTRACT = {"system_prompt": {"contains": "event graph"}}


def _event(summary, event_id="n1", **extra):
    return {"event_id": event_id, "actor": "user", "action_type": "report", "content_summary": summary, **extra}


def _answer(reply, events, relations=()):
    return json.dumps({"user_reply": reply, "new_events": events, "relations": list(relations)}, ensure_ascii=False)


def _deltas(sink):
    return "".join(frame["content"] for frame in sink.of("delta"))


def _read(tenant, fn):
    @database_sync_to_async
    def read():
        with tenant_scope(tenant):
            return fn()

    return read()


async def test_the_reply_streams_alone_and_the_events_need_no_second_call(tenant, member, memory_agent, scripted_llm):
    agent = await memory_agent(extraction="combined")
    reply = '已记录：越南A港口因台风关闭。\n我会留意 "物料B" 的交期。'
    answer = _answer(reply, [_event("越南A港口因台风关闭", entities=[{"name": "A港口", "type": "PLACE"}])])
    scripted_llm.set_rules({"when": CHAT, "reply": {"text": answer, "chunk_size": 3}})
    conversation = await _start(tenant, agent, member)

    _user, stored, sink = await user_turn(tenant, conversation, "报告：越南A港口因台风临时关闭。")

    assert sink.result.status == TurnStatus.COMPLETED
    assert len(sink.of("delta")) > 3 and _deltas(sink) == reply  # streamed in pieces, nothing of the JSON shown
    assert stored.content == reply and sink.of("done")[0]["content"] == reply
    (request,) = await asyncio.to_thread(scripted_llm.requests)  # the events came with the reply: one call
    system = request["body"]["messages"][0]["content"]
    assert system.startswith("You track supply chain risks.") and '"user_reply"' in system
    event = await _read(tenant, lambda: Event.objects.get())
    assert event.content_summary == "越南A港口因台风关闭" and event.source_message_ids
    metric = await _read(tenant, lambda: MemoryMetric.objects.get(agent_id=agent.pk))
    assert (metric.extractions, metric.repaired, metric.skipped, metric.events_added) == (1, 0, 0, 1)


async def test_a_later_answer_links_its_event_to_a_recalled_one(tenant, member, memory_agent, scripted_llm):
    agent = await memory_agent(extraction="combined")
    scripted_llm.set_rules({"when": CHAT, "reply": {"text": _answer("好的。", [_event("A港口因台风关闭")])}})
    await user_turn(tenant, await _start(tenant, agent, member), "A港口因台风关闭了。")
    port = await _read(tenant, lambda: Event.objects.get())

    delayed = _event("物料B因A港口关闭而延迟", entities=[{"name": "物料B", "type": "PRODUCT"}])
    relation = {"source": port.event_id, "type": "causes", "target": "n1"}
    scripted_llm.set_rules({"when": CHAT, "reply": {"text": _answer("明白，物料B会延迟。", [delayed], [relation])}})
    await user_turn(tenant, await _start(tenant, agent, member), "A港口的事情影响到物料B了吗？")

    system = (await asyncio.to_thread(scripted_llm.requests))[-1]["body"]["messages"][0]["content"]
    assert f"[{port.event_id}]" in system  # the known event is recalled with its id, so the answer can name it
    link = await _read(tenant, lambda: EventRelation.objects.select_related("source", "target").get())
    assert (link.source.event_id, link.kind, link.target.content_summary) == (
        port.event_id, "causes", "物料B因A港口关闭而延迟"
    )  # fmt: skip


async def test_invalid_events_in_the_answer_get_one_repair_call(tenant, member, memory_agent, scripted_llm):
    agent = await memory_agent(extraction="combined")
    scripted_llm.set_rules(
        {"when": CHAT, "reply": {"text": _answer("Noted.", [{"event_id": 7}])}},
        {"when": EXTRACT, "reply": {"text": json.dumps({"new_events": [_event("Acme closed its plant")]})}},
    )
    _user, stored, sink = await user_turn(tenant, await _start(tenant, agent, member), "Acme closed its plant.")

    assert stored.content == "Noted." and _deltas(sink) == "Noted."
    _chat, repair = await asyncio.to_thread(scripted_llm.requests)
    last = repair["body"]["messages"]
    assert "event graph" in last[0]["content"] and "invalid (new_events/0" in last[-1]["content"]
    assert '"event_id": 7' in last[-2]["content"]  # the repair sees the events the reply came with
    assert (await _read(tenant, lambda: Event.objects.get())).content_summary == "Acme closed its plant"
    metric = await _read(tenant, lambda: MemoryMetric.objects.get(agent_id=agent.pk))
    assert (metric.extractions, metric.repaired, metric.skipped) == (1, 1, 0)


async def test_a_prose_answer_is_the_reply_and_failed_events_are_skipped_and_counted(
    tenant, member, memory_agent, scripted_llm
):
    agent = await memory_agent(extraction="combined")
    scripted_llm.set_rules(
        {"when": CHAT, "reply": {"text": "Plain words, no JSON."}},
        {"when": EXTRACT, "reply": {"text": "still no JSON"}},
    )
    _user, stored, sink = await user_turn(tenant, await _start(tenant, agent, member), "Hello there.")

    assert stored.content == "Plain words, no JSON." and _deltas(sink) == "Plain words, no JSON."
    assert len(await asyncio.to_thread(scripted_llm.requests)) == 2  # the reply, then the one repair
    assert await _read(tenant, lambda: Event.objects.count()) == 0
    metric = await _read(tenant, lambda: MemoryMetric.objects.get(agent_id=agent.pk))
    assert (metric.extractions, metric.skipped) == (0, 1)
