"""The event graph (seed 2): validation with one repair, dedupe, supersession, entities, the causal walk."""

import datetime as dt
import json

import pytest

from agents.services import conversation_start
from memory.longterm import events as event_graph
from memory.longterm.events import ExtractionInvalid, events_store, events_walk, parse_extraction, timeline
from memory.longterm.extraction import turn_memory_extract
from memory.longterm.recall import owner_of
from memory.longterm.strength import Owner
from memory.models import Entity, Event, EventRelation, MemoryMetric, TurnMemory
from memory.services import message_add

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2025, 7, 17, 10, 30, tzinfo=dt.UTC)


def _event(event_id, summary, **extra):
    return {"event_id": event_id, "actor": "user", "action_type": "report", "content_summary": summary, **extra}


def test_parse_extraction_accepts_a_fenced_answer_and_names_what_is_wrong():
    good = {"new_events": [_event("n1", "港口关闭", entities=[{"name": "A港口", "type": "PLACE"}])]}
    assert parse_extraction("Here:\n```json\n" + json.dumps(good, ensure_ascii=False) + "\n```") == good
    with pytest.raises(ExtractionInvalid, match="not JSON"):
        parse_extraction("no events today")
    with pytest.raises(ExtractionInvalid, match=r"new_events/0.*content_summary"):
        parse_extraction(json.dumps({"new_events": [{"event_id": "n1", "actor": "user", "action_type": "x"}]}))
    with pytest.raises(ExtractionInvalid, match="actor"):
        parse_extraction(json.dumps({"new_events": [_event("n1", "x", actor="robot")]}))


def _supply_chain(owner):
    """Seed 2's story, as three extractions: a typhoon closes port A, material B is late, customer C's order."""
    first = events_store(owner, {"new_events": [_event("n1", "越南A港口因台风临时关闭", entities=[
        {"name": "A港口", "type": "PLACE"}, {"name": "台风", "type": "OTHER"}])]}, now=T0)  # fmt: skip
    port = first.added[0].event_id
    second = events_store(owner, {
        "new_events": [_event("n1", "B物料运输出现延误", entities=[{"name": "B物料", "type": "PRODUCT"}])],
        "relations": [{"source": port, "type": "causes", "target": "n1"}],
    }, now=T0 + dt.timedelta(minutes=5))  # fmt: skip
    delay = second.added[0].event_id
    third = events_store(owner, {
        "new_events": [_event("n1", "用户查询客户C的订单状态", action_type="query",
                              entities=[{"name": "客户C", "type": "ORG"}])],
        "relations": [{"source": delay, "type": "causes", "target": "n1"}],
    }, now=T0 + dt.timedelta(minutes=9))  # fmt: skip
    return first.added[0], second.added[0], third.added[0]


def test_seed_2s_question_walks_the_causes_back_to_the_typhoon(member, in_tenant):
    owner = Owner(user_id=member.pk, key="1_1")
    port, delay, order = _supply_chain(owner)

    walked = events_walk(owner, "客户C的订单为什么可能延迟？", top_k=1, depth=2)

    assert walked.retrieved_ids == [order.pk]
    assert [event.pk for event in walked.events] == [order.pk, delay.pk, port.pk]
    lines, shown = timeline(walked, budget_tokens=500)
    assert [event.pk for event in shown] == [port.pk, delay.pk, order.pk]  # oldest first
    assert f"causes → {delay.event_id}" in lines[0] and "越南A港口因台风临时关闭" in lines[0]
    assert f"causes → {order.event_id}" in lines[1]
    # One hop only reaches the direct cause.
    assert [e.pk for e in events_walk(owner, "客户C的订单为什么可能延迟？", top_k=1, depth=1).events] == [
        order.pk, delay.pk,
    ]  # fmt: skip
    delay.refresh_from_db()
    assert delay.related_event_ids == [order.event_id]
    assert set(Entity.objects.values_list("name", flat=True)) == {"A港口", "台风", "B物料", "客户C"}


def test_the_timeline_keeps_the_retrieved_event_when_the_budget_is_small(member, in_tenant):
    owner = Owner(user_id=member.pk, key="1_1")
    _port, _delay, order = _supply_chain(owner)
    walked = events_walk(owner, "客户C的订单为什么可能延迟？", top_k=1, depth=2)
    lines, shown = timeline(walked, budget_tokens=60)
    assert shown[0].pk == order.pk and len(lines) < 3


def test_the_same_fact_twice_is_one_event_and_a_contradiction_supersedes(member, in_tenant):
    owner = Owner(user_id=member.pk, key="1_1")
    meeting = events_store(owner, {"new_events": [_event("n1", "The review meeting is on Friday.")]}, now=T0)
    again = events_store(owner, {"new_events": [_event("n1", "the review meeting is on friday")]}, now=T0)
    assert (len(again.added), again.duplicates, Event.objects.count()) == (0, 1, 1)

    old = meeting.added[0]
    moved = events_store(owner, {"new_events": [
        _event("n1", "The review meeting moved to Monday.", supersedes=[old.event_id])]},
        now=T0 + dt.timedelta(hours=1))  # fmt: skip
    old.refresh_from_db()
    assert old.superseded_by_id == moved.added[0].pk
    assert old.superseded_at == T0 + dt.timedelta(hours=1)
    assert moved.superseded == 1
    lines, _ = timeline(events_walk(owner, "review meeting", top_k=5, depth=0), budget_tokens=500)
    assert any(f"superseded by {moved.added[0].event_id}" in line for line in lines)


def test_a_resolution_completes_a_pending_event(member, in_tenant):
    owner = Owner(user_id=member.pk, key="1_1")
    ticket = events_store(owner, {"new_events": [_event("n1", "Invoice 42 is missing", status="pending")]}).added[0]
    events_store(owner, {"new_events": [_event("n1", "Invoice 42 was found in the archive")],
                         "relations": [{"source": "n1", "type": "resolves", "target": ticket.event_id}]})  # fmt: skip
    ticket.refresh_from_db()
    assert ticket.status == "completed"
    assert EventRelation.objects.get().kind == "resolves"


def test_rules_give_one_event_per_message_with_entities_and_links(make_agent, member, in_tenant):
    agent = make_agent()
    conversation = conversation_start(agent=agent, user=member)
    user = message_add(conversation=conversation, role="user", content="报告：越南A港口因台风临时关闭。")
    reply = message_add(conversation=conversation, role="assistant", content="收到，我会关注A港口的后续。")
    assert turn_memory_extract(
        conversation=conversation, user_message_id=user.pk, reply_message_id=reply.pk, mode="rules"
    ) == "stored"  # fmt: skip

    first, second = Event.objects.order_by("id")
    assert (first.actor, first.action_type, first.source_message_ids) == ("user", "report", [user.pk])
    assert {"name": "A港口", "type": "OTHER"} in first.entities and {"name": "越南", "type": "PLACE"} in first.entities
    assert (second.actor, second.source_message_ids) == ("assistant", [reply.pk])
    kinds = set(EventRelation.objects.values_list("source_id", "kind", "target_id"))
    assert (second.pk, "follows", first.pk) in kinds and (second.pk, "refers_to", first.pk) in kinds
    assert first.key == owner_of(conversation).key == f"{agent.pk}_{member.pk}"
    assert TurnMemory.objects.get().text.startswith("User: 报告：越南A港口")
    assert MemoryMetric.objects.get(agent_id=agent.pk).events_added == 2


EXTRACT = {"system_prompt": {"contains": "event graph"}}


def _extract_turn(make_agent, member):
    agent = make_agent()
    conversation = conversation_start(agent=agent, user=member)
    user = message_add(conversation=conversation, role="user", content="Our supplier Acme closed the Shenzhen plant.")
    reply = message_add(conversation=conversation, role="assistant", content="Noted.")
    outcome = turn_memory_extract(
        conversation=conversation, user_message_id=user.pk, reply_message_id=reply.pk, mode="model"
    )
    return agent, outcome


def test_an_invalid_extraction_is_repaired_once(make_agent, member, in_tenant, scripted_provider, scripted_llm):
    valid = {"new_events": [_event("n1", "Acme closed its Shenzhen plant", entities=[{"name": "Acme", "type": "ORG"}])]}
    scripted_llm.set_rules(
        {"when": EXTRACT, "times": 1, "reply": {"text": "Sure! The events are: Acme closed a plant."}},
        {"when": EXTRACT, "reply": {"text": json.dumps(valid)}},
    )
    agent, outcome = _extract_turn(make_agent, member)
    assert outcome == "stored"
    assert Event.objects.get().content_summary == "Acme closed its Shenzhen plant"
    first, second = scripted_llm.requests()
    assert "Our supplier Acme" in first["body"]["messages"][-1]["content"]
    assert "invalid (not JSON" in second["body"]["messages"][-1]["content"]
    metric = MemoryMetric.objects.get(agent_id=agent.pk)
    assert (metric.extractions, metric.repaired, metric.skipped, metric.events_added) == (1, 1, 0, 1)


def test_a_second_invalid_extraction_is_skipped_and_counted(
    make_agent, member, in_tenant, scripted_provider, scripted_llm
):
    scripted_llm.set_rules({"when": EXTRACT, "reply": {"text": '{"new_events": [{"event_id": 1}]}'}})
    agent, outcome = _extract_turn(make_agent, member)
    assert outcome == "skipped"
    assert Event.objects.count() == 0 and len(scripted_llm.requests()) == 2
    assert TurnMemory.objects.count() == 1  # the turn is still indexed for recall
    metric = MemoryMetric.objects.get(agent_id=agent.pk)
    assert (metric.extractions, metric.skipped) == (0, 1)


def test_a_failing_model_skips_the_extraction(make_agent, member, in_tenant, scripted_provider, scripted_llm):
    scripted_llm.set_rules({"when": EXTRACT, "reply": {"error": {"status": 500}}})
    agent, outcome = _extract_turn(make_agent, member)
    assert outcome == "skipped" and Event.objects.count() == 0
    assert MemoryMetric.objects.get(agent_id=agent.pk).skipped == 1


def test_rule_entities_find_names_in_english_and_chinese():
    names = {entity["name"] for entity in event_graph.rule_entities("Caroline met Melanie at the LGBTQ support group")}
    assert {"Caroline", "Melanie", "LGBTQ"} <= names
    names = {entity["name"] for entity in event_graph.rule_entities("查询客户C的订单状态，张三在北京")}
    assert {"客户C", "张三", "北京"} <= names


def test_a_plan_steps_agent_keeps_its_own_memory_under_seed_0s_key(make_agent, member, in_tenant):
    from agents.services import conversation_start as start

    planner, step_agent = make_agent("Planner"), make_agent("Researcher")
    plan_conversation = start(agent=planner, user=member)
    step_conversation = start(agent=step_agent, user=member, parent=plan_conversation)
    owner = owner_of(step_conversation)
    assert owner.key == f"{step_agent.pk}_{member.pk}_{step_conversation.pk}" == step_conversation.memory_key
    assert owner_of(plan_conversation).key == f"{planner.pk}_{member.pk}"
    events_store(owner, {"new_events": [_event("n1", "Step memory: the report is due Friday")]})
    assert events_walk(owner_of(plan_conversation), "report due Friday", top_k=5, depth=1).events == []
    assert len(events_walk(owner, "report due Friday", top_k=5, depth=1).events) == 1
